// #/exchanges/{vhost}/{name} — one exchange: type, arguments, bindings both ways, publish, delete.
import { useState } from "preact/hooks";
import { api } from "../api";
import { act, notFound, ArgsTable, ErrorBox, Section, usePoll } from "../components";
import { rate } from "../format";
import { go, href } from "../router";
import type { Binding } from "../types";
import { exchangeType } from "./exchanges";
import { PublishForm } from "./messages";

export function ExchangePage({ vhost, name: urlName }: { vhost: string; name: string }) {
  const name = urlName === "amq.default" ? "" : urlName;
  const exchange = usePoll(() => api.exchange(vhost, name), [vhost, name]);
  const from = usePoll(() => api.bindingsFrom(vhost, name), [vhost, name]);
  const to = usePoll(() => api.bindingsTo(vhost, name), [vhost, name]);
  const [form, setForm] = useState({ destType: "q", dest: "", key: "" });
  const e = exchange.data;
  const reload = () => {
    from.reload();
    to.reload();
  };
  const bind = async (ev: Event) => {
    ev.preventDefault();
    await act(() => api.bind(vhost, name, form.destType as "q" | "e", form.dest, form.key), "Binding added");
    reload();
  };
  return (
    <div>
      <h1>
        Exchange <span class="name">{name || "(AMQP default)"}</span> <span class="muted">in {vhost}</span>
      </h1>
      <ErrorBox error={notFound(exchange.error, `No exchange ${name} in virtual host ${vhost}: it does not exist, or was deleted.`)} />
      {e && (
        <Section title="Details">
          <table class="kv">
            <tbody>
              <tr>
                <th>Type</th>
                <td id="exchange-type">{exchangeType(e)}</td>
              </tr>
              <tr>
                <th>Features</th>
                <td>
                  {e.durable ? "durable " : "transient "}
                  {e.auto_delete ? "auto-delete " : ""}
                  {e.internal ? "internal" : ""}
                </td>
              </tr>
              <tr>
                <th>Policy</th>
                <td>{e.policy ?? "none"}</td>
              </tr>
              <tr>
                <th>Rates</th>
                <td>
                  in {rate(e.message_stats?.publish_in_details?.rate)}, out{" "}
                  {rate(e.message_stats?.publish_out_details?.rate)}
                </td>
              </tr>
              <tr>
                <th>Arguments</th>
                <td>
                  <ArgsTable args={e.arguments} />
                </td>
              </tr>
            </tbody>
          </table>
          {e.type === "x-delayed-message" && (
            <p class="muted">
              Messages published here with an <code>x-delay</code> header wait that many ms in their target queues
              (shown as delayed on each queue's page), then route as a {String(e.arguments["x-delayed-type"])} exchange.
            </p>
          )}
        </Section>
      )}
      <Section title="Bindings from this exchange">
        <ErrorBox error={from.error} />
        <BindingTable bindings={from.data ?? []} side="destination" reload={reload} />
        {name !== "" && (
          <form class="form inline" onSubmit={bind}>
            <select
              value={form.destType}
              onChange={(ev) => setForm({ ...form, destType: (ev.target as HTMLSelectElement).value })}
            >
              <option value="q">To queue</option>
              <option value="e">To exchange</option>
            </select>
            <input
              placeholder="destination"
              value={form.dest}
              onInput={(ev) => setForm({ ...form, dest: (ev.target as HTMLInputElement).value })}
            />
            <input
              placeholder="routing key"
              value={form.key}
              onInput={(ev) => setForm({ ...form, key: (ev.target as HTMLInputElement).value })}
            />
            <button type="submit">Bind</button>
          </form>
        )}
      </Section>
      <Section title="Bindings to this exchange">
        <ErrorBox error={to.error} />
        <BindingTable bindings={to.data ?? []} side="source" reload={reload} />
      </Section>
      <Section title="Publish message">
        <PublishForm vhost={vhost} exchange={name} delayed={e?.type === "x-delayed-message"} />
      </Section>
      {name !== "" && !name.startsWith("amq.") && (
        <Section title="Delete">
          <button
            class="danger"
            id="delete-exchange"
            onClick={async () => {
              if (await act(() => api.deleteExchange(vhost, name), `Exchange ${name} deleted`)) go("exchanges");
            }}
          >
            Delete exchange
          </button>
        </Section>
      )}
    </div>
  );
}

function BindingTable({
  bindings,
  side,
  reload,
}: {
  bindings: Binding[];
  side: "source" | "destination";
  reload: () => void;
}) {
  if (bindings.length === 0) return <p class="muted">no bindings</p>;
  return (
    <table class="list">
      <thead>
        <tr>
          <th>{side === "source" ? "From" : "To"}</th>
          <th>Routing key</th>
          <th>Arguments</th>
          <th />
        </tr>
      </thead>
      <tbody>
        {bindings.map((b) => {
          const other = side === "source" ? b.source : b.destination;
          const page = side === "source" || b.destination_type === "exchange" ? "exchanges" : "queues";
          return (
            <tr key={b.source + b.destination + b.properties_key}>
              <td>
                <a href={href(page, b.vhost, other)}>{other}</a>{" "}
                <span class="muted">{side === "destination" ? b.destination_type : "exchange"}</span>
              </td>
              <td>{b.routing_key}</td>
              <td>{JSON.stringify(b.arguments)}</td>
              <td>
                <button onClick={() => act(() => api.unbind(b), "Binding removed").then(reload)}>Unbind</button>
              </td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}
