// #/vhosts — virtual hosts: list, add, delete, tracing on/off; and the vhost picker other forms use.
import { useState } from "preact/hooks";
import { isAdmin, refusedTitle } from "../access";
import { api } from "../api";
import { act, Field, Section, ServerTable, usePoll, type Column } from "../components";
import { num } from "../format";
import type { Vhost } from "../types";

/** A select of the vhosts the user may see, bound to `form.vhost`. */
export function VhostChoice<F extends { vhost: string } & Record<string, string>>(props: {
  form: F;
  set: (f: F) => void;
}) {
  const vhosts = usePoll(() => api.vhostNames(), [], 30_000);
  const names = vhosts.data?.map((v) => v.name) ?? [props.form.vhost];
  return (
    <label class="field">
      <span>Virtual host</span>
      <select
        name="vhost"
        value={props.form.vhost}
        onChange={(e) => props.set({ ...props.form, vhost: (e.target as HTMLSelectElement).value })}
      >
        {names.map((n) => (
          <option value={n}>{n}</option>
        ))}
      </select>
    </label>
  );
}

export function VhostsPage() {
  const [reloadKey, setReloadKey] = useState(0);
  const reload = () => setReloadKey((k) => k + 1);
  const [form, setForm] = useState({ name: "", description: "" });
  const columns: Column<Vhost>[] = [
    { label: "Name", sort: "name", render: (v) => v.name },
    { label: "Description", render: (v) => v.description ?? "" },
    { label: "Messages", sort: "messages", render: (v) => num(v.messages), class: "n" },
    {
      label: "Tracing",
      render: (v) => (
        <button
          class="trace-vhost"
          disabled={!isAdmin()}
          data-vhost={v.name}
          data-tracing={v.tracing ? "on" : "off"}
          title={
            isAdmin()
              ? "The firehose: copies of every publish and delivery on amq.rabbitmq.trace"
              : refusedTitle("switch tracing (needs the administrator tag)")
          }
          onClick={() =>
            act(() => api.setTracing(v.name, !v.tracing), `Tracing ${v.tracing ? "stopped" : "started"} for ${v.name}`).then(reload)
          }
        >
          {v.tracing ? "On: stop" : "Off: start"}
        </button>
      ),
    },
    {
      label: "",
      render: (v) =>
        isAdmin() && (
          <button class="danger" onClick={() => act(() => api.deleteVhost(v.name), `Virtual host ${v.name} deleted`).then(reload)}>
            Delete
          </button>
        ),
    },
  ];
  const add = async (e: Event) => {
    e.preventDefault();
    if (await act(() => api.putVhost(form.name, form.description), `Virtual host ${form.name} added`)) reload();
  };
  return (
    <div>
      <h1>Virtual hosts</h1>
      <ServerTable what="virtual hosts" load={api.vhosts} columns={columns} rowKey={(v) => v.name} reloadKey={reloadKey} />
      {isAdmin() ? (
        <Section title="Add a new virtual host">
          <form class="form" id="add-vhost" onSubmit={add}>
            <Field label="Name" form={form} set={setForm} name="name" />
            <Field label="Description" form={form} set={setForm} name="description" />
            <button type="submit">Add virtual host</button>
          </form>
        </Section>
      ) : (
        <p class="read-only" id="vhosts-read-only">Adding, deleting and tracing virtual hosts needs the administrator tag.</p>
      )}
    </div>
  );
}
