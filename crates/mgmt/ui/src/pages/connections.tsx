// #/connections and #/channels — open AMQP connections and channels, with close.
import { useState } from "preact/hooks";
import { mayClose } from "../access";
import { api } from "../api";
import { act, ServerTable, type Column } from "../components";
import { num, rate } from "../format";
import type { Channel, Connection } from "../types";

/** Close, for an administrator or the connection's own user (the API refuses others). */
function closeButton(name: string, owner: string, reload: () => void) {
  if (!mayClose(owner)) return null;
  return (
    <button class="danger" onClick={() => act(() => api.closeConnection(name), `Connection ${name} closed`).then(reload)}>
      Close connection
    </button>
  );
}

export function ConnectionsPage() {
  const [reloadKey, setReloadKey] = useState(0);
  const reload = () => setReloadKey((k) => k + 1);
  const columns: Column<Connection>[] = [
    { label: "Name", sort: "name", render: (c) => c.name },
    { label: "User", sort: "user", render: (c) => c.user },
    { label: "Virtual host", sort: "vhost", render: (c) => c.vhost },
    { label: "State", render: (c) => c.state },
    { label: "Protocol", render: (c) => c.protocol },
    { label: "Channels", sort: "channels", render: (c) => num(c.channels), class: "n" },
    { label: "", render: (c) => closeButton(c.name, c.user, reload) },
  ];
  return (
    <div>
      <h1>Connections</h1>
      <ServerTable what="connections" load={api.connections} columns={columns} rowKey={(c) => c.name} reloadKey={reloadKey} />
    </div>
  );
}

export function ChannelsPage() {
  const [reloadKey, setReloadKey] = useState(0);
  const reload = () => setReloadKey((k) => k + 1);
  const mode = (c: Channel) => [c.confirm ? "C" : "", c.transactional ? "T" : ""].join("");
  const columns: Column<Channel>[] = [
    { label: "Channel", sort: "name", render: (c) => c.name },
    { label: "User", sort: "user", render: (c) => c.user },
    { label: "Virtual host", sort: "vhost", render: (c) => c.vhost },
    { label: "Mode", render: (c) => <span title="C confirm, T transactional">{mode(c)}</span> },
    { label: "Prefetch", render: (c) => num(c.prefetch_count), class: "n" },
    { label: "Unacked", sort: "messages_unacknowledged", render: (c) => num(c.messages_unacknowledged), class: "n" },
    { label: "Consumers", render: (c) => num(c.consumer_count), class: "n" },
    { label: "Publish", render: (c) => rate(c.message_stats?.publish_details?.rate), class: "n" },
    { label: "Deliver / get", render: (c) => rate(c.message_stats?.deliver_get_details?.rate), class: "n" },
    { label: "Ack", render: (c) => rate(c.message_stats?.ack_details?.rate), class: "n" },
    { label: "", render: (c) => closeButton(c.connection_details.name, c.user, reload) },
  ];
  return (
    <div>
      <h1>Channels</h1>
      <p class="muted">AMQP 0-9-1 has no way for the broker to close one channel alone; closing closes its connection.</p>
      <ServerTable what="channels" load={api.channels} columns={columns} rowKey={(c) => c.name} reloadKey={reloadKey} />
    </div>
  );
}
