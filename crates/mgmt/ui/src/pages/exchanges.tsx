// #/exchanges — the list (x-delayed-message named as such) and declaring an exchange.
import { useState } from "preact/hooks";
import { api } from "../api";
import { act, Choice, Field, parseObject, Section, ServerTable, type Column } from "../components";
import { rate } from "../format";
import { href } from "../router";
import type { Exchange } from "../types";
import { VhostChoice } from "./vhosts";

/** `x-delayed-message` exchanges route as their `x-delayed-type` after the delay. */
export function exchangeType(e: Exchange): string {
  if (e.type === "x-delayed-message") {
    const inner = e.arguments?.["x-delayed-type"];
    return `delayed message (${typeof inner === "string" ? inner : "?"})`;
  }
  return e.type;
}

const COLUMNS: Column<Exchange>[] = [
  { label: "Virtual host", sort: "vhost", render: (e) => e.vhost },
  {
    label: "Name",
    sort: "name",
    render: (e) => <a href={href("exchanges", e.vhost, e.name || "amq.default")}>{e.name || "(AMQP default)"}</a>,
  },
  { label: "Type", sort: "type", render: (e) => <span class={`type-${e.type}`}>{exchangeType(e)}</span> },
  {
    label: "Features",
    render: (e) => [e.durable ? "D" : "", e.auto_delete ? "AD" : "", e.internal ? "I" : ""].filter(Boolean).join(" "),
  },
  { label: "Policy", render: (e) => e.policy ?? "" },
  { label: "Rate in", render: (e) => rate(e.message_stats?.publish_in_details?.rate), class: "n" },
  { label: "Rate out", render: (e) => rate(e.message_stats?.publish_out_details?.rate), class: "n" },
];

export function ExchangesPage() {
  const [reloadKey, setReloadKey] = useState(0);
  return (
    <div>
      <h1>Exchanges</h1>
      <ServerTable
        what="exchanges"
        load={api.exchanges}
        columns={COLUMNS}
        rowKey={(e) => `${e.vhost}\u0000${e.name}`}
        reloadKey={reloadKey}
      />
      <AddExchange onAdded={() => setReloadKey((k) => k + 1)} />
    </div>
  );
}

function AddExchange({ onAdded }: { onAdded: () => void }) {
  const [form, setForm] = useState({ vhost: "/", name: "", type: "direct", durable: "true", arguments: "" });
  const submit = async (e: Event) => {
    e.preventDefault();
    const ok = await act(
      () =>
        api.declareExchange(form.vhost, form.name, {
          type: form.type,
          durable: form.durable === "true",
          arguments: parseObject(form.arguments, "Arguments"),
        }),
      `Exchange ${form.name} declared`,
    );
    if (ok) onAdded();
  };
  return (
    <Section title="Add a new exchange">
      <form class="form" id="add-exchange" onSubmit={submit}>
        <VhostChoice form={form} set={setForm} />
        <Field label="Name" form={form} set={setForm} name="name" />
        <Choice
          label="Type"
          form={form}
          set={setForm}
          name="type"
          options={[
            ["direct", "direct"],
            ["fanout", "fanout"],
            ["headers", "headers"],
            ["topic", "topic"],
            ["x-delayed-message", "x-delayed-message"],
          ]}
        />
        <Choice label="Durability" form={form} set={setForm} name="durable" options={[["true", "Durable"], ["false", "Transient"]]} />
        <Field
          label="Arguments (JSON)"
          form={form}
          set={setForm}
          name="arguments"
          textarea
          placeholder='{"x-delayed-type": "direct"}'
        />
        <button type="submit">Add exchange</button>
      </form>
    </Section>
  );
}
