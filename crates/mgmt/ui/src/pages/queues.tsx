// #/queues — every queue, paged/sorted/filtered by the server; declare a queue.
import { useState } from "preact/hooks";
import { api } from "../api";
import { act, Choice, Field, parseObject, Section, ServerTable, type Column } from "../components";
import { num, rate } from "../format";
import { href } from "../router";
import type { Queue } from "../types";
import { VhostChoice } from "./vhosts";

function features(q: Queue): string {
  const f: string[] = [];
  if (q.durable) f.push("D");
  if (q.auto_delete) f.push("AD");
  if (q.exclusive) f.push("Excl");
  if (Object.keys(q.arguments ?? {}).length) f.push("Args");
  return f.join(" ");
}

const COLUMNS: Column<Queue>[] = [
  { label: "Virtual host", sort: "vhost", render: (q) => q.vhost },
  { label: "Name", sort: "name", render: (q) => <a href={href("queues", q.vhost, q.name)}>{q.name}</a> },
  { label: "Type", render: (q) => q.type },
  { label: "Features", render: (q) => <span title="D durable, AD auto-delete, Args arguments">{features(q)}</span> },
  { label: "Policy", render: (q) => q.policy ?? "" },
  { label: "Ready", sort: "messages_ready", render: (q) => num(q.messages_ready), class: "n" },
  { label: "Unacked", sort: "messages_unacknowledged", render: (q) => num(q.messages_unacknowledged), class: "n" },
  { label: "Delayed", sort: "messages_delayed", render: (q) => num(q.messages_delayed), class: "n" },
  { label: "Total", sort: "messages", render: (q) => num(q.messages), class: "n" },
  { label: "Consumers", sort: "consumers", render: (q) => num(q.consumers), class: "n" },
  { label: "Incoming", render: (q) => rate(q.message_stats?.publish_details?.rate), class: "n" },
  { label: "Deliver / get", render: (q) => rate(q.message_stats?.deliver_get_details?.rate), class: "n" },
  { label: "Ack", render: (q) => rate(q.message_stats?.ack_details?.rate), class: "n" },
];

export function QueuesPage() {
  const [reloadKey, setReloadKey] = useState(0);
  return (
    <div>
      <h1>Queues</h1>
      <ServerTable
        what="queues"
        load={api.queues}
        columns={COLUMNS}
        rowKey={(q) => `${q.vhost}\u0000${q.name}`}
        reloadKey={reloadKey}
      />
      <AddQueue onAdded={() => setReloadKey((k) => k + 1)} />
    </div>
  );
}

function AddQueue({ onAdded }: { onAdded: () => void }) {
  const [form, setForm] = useState({ vhost: "/", name: "", durable: "true", arguments: "" });
  const submit = async (e: Event) => {
    e.preventDefault();
    const ok = await act(
      () =>
        api.declareQueue(form.vhost, form.name, {
          durable: form.durable === "true",
          auto_delete: false,
          arguments: parseObject(form.arguments, "Arguments"),
        }),
      `Queue ${form.name} declared`,
    );
    if (ok) onAdded();
  };
  return (
    <Section title="Add a new queue">
      <form class="form" id="add-queue" onSubmit={submit}>
        <VhostChoice form={form} set={setForm} />
        <Field label="Name" form={form} set={setForm} name="name" />
        <Choice label="Durability" form={form} set={setForm} name="durable" options={[["true", "Durable"], ["false", "Transient"]]} />
        <Field
          label="Arguments (JSON)"
          form={form}
          set={setForm}
          name="arguments"
          textarea
          placeholder='{"x-message-ttl": 60000, "x-dead-letter-exchange": "dlx"}'
        />
        <button type="submit">Add queue</button>
      </form>
    </Section>
  );
}
