// #/policies — policies: list, add, edit (load into the form), delete.
import { useState } from "preact/hooks";
import { mayManagePolicies } from "../access";
import { api } from "../api";
import { act, Choice, Field, parseObject, Section, ServerTable, type Column } from "../components";
import type { Policy } from "../types";
import { VhostChoice } from "./vhosts";

const EMPTY = { vhost: "/", name: "", pattern: "", applyTo: "all", priority: "0", definition: "" };

export function PoliciesPage() {
  // Listing and setting policies both need administrator or policymaker (the API's rule).
  if (!mayManagePolicies())
    return (
      <div>
        <h1>Policies</h1>
        <p class="read-only" id="policies-read-only">
          Policies are seen and set by users tagged administrator or policymaker only.
        </p>
      </div>
    );
  return <PolicyEditor />;
}

function PolicyEditor() {
  const [reloadKey, setReloadKey] = useState(0);
  const reload = () => setReloadKey((k) => k + 1);
  const [form, setForm] = useState(EMPTY);
  const edit = (p: Policy) =>
    setForm({
      vhost: p.vhost,
      name: p.name,
      pattern: p.pattern,
      applyTo: p["apply-to"],
      priority: String(p.priority),
      definition: JSON.stringify(p.definition),
    });
  const columns: Column<Policy>[] = [
    { label: "Virtual host", sort: "vhost", render: (p) => p.vhost },
    { label: "Name", sort: "name", render: (p) => p.name },
    { label: "Pattern", render: (p) => p.pattern },
    { label: "Apply to", render: (p) => p["apply-to"] },
    { label: "Definition", render: (p) => JSON.stringify(p.definition) },
    { label: "Priority", sort: "priority", render: (p) => p.priority, class: "n" },
    {
      label: "",
      render: (p) => (
        <span>
          <button onClick={() => edit(p)}>Edit</button>{" "}
          <button
            class="danger delete-policy"
            data-policy={p.name}
            onClick={() => act(() => api.deletePolicy(p.vhost, p.name), `Policy ${p.name} deleted`).then(reload)}
          >
            Delete
          </button>
        </span>
      ),
    },
  ];
  const save = async (e: Event) => {
    e.preventDefault();
    const ok = await act(
      () =>
        api.putPolicy({
          vhost: form.vhost,
          name: form.name,
          pattern: form.pattern,
          "apply-to": form.applyTo,
          priority: Number(form.priority) || 0,
          definition: parseObject(form.definition, "Definition"),
        }),
      `Policy ${form.name} saved`,
    );
    if (ok) reload();
  };
  return (
    <div>
      <h1>Policies</h1>
      <ServerTable what="policies" load={api.policies} columns={columns} rowKey={(p) => `${p.vhost}\u0000${p.name}`} reloadKey={reloadKey} />
      <Section title="Add / update a policy">
        <form class="form" id="add-policy" onSubmit={save}>
          <VhostChoice form={form} set={setForm} />
          <Field label="Name" form={form} set={setForm} name="name" />
          <Field label="Pattern" form={form} set={setForm} name="pattern" placeholder="^orders\." />
          <Choice
            label="Apply to"
            form={form}
            set={setForm}
            name="applyTo"
            options={[["all", "Exchanges and queues"], ["queues", "Queues"], ["exchanges", "Exchanges"]]}
          />
          <Field label="Priority" form={form} set={setForm} name="priority" type="number" />
          <Field
            label="Definition (JSON)"
            form={form}
            set={setForm}
            name="definition"
            textarea
            placeholder='{"message-ttl": 60000, "dead-letter-exchange": "dlx"}'
          />
          <button type="submit">Add / update policy</button>
        </form>
      </Section>
    </div>
  );
}
