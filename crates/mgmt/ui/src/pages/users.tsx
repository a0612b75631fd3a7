// #/users — users (add, change, delete) and their permissions per vhost; a user's name leads to
// its page (#/users/{name}: its access keys, pages/user.tsx).
import { useState } from "preact/hooks";
import { isAdmin } from "../access";
import { api } from "../api";
import { act, ErrorBox, Field, Section, ServerTable, usePoll, type Column } from "../components";
import { tags } from "../format";
import { href } from "../router";
import type { User } from "../types";
import { VhostChoice } from "./vhosts";

export function UsersPage() {
  if (!isAdmin())
    return (
      <div>
        <h1>Users</h1>
        <p class="read-only" id="users-admin-only">
          Users and permissions are seen and changed by administrators only (the administrator tag).
        </p>
      </div>
    );
  return <AdminUsersPage />;
}

function AdminUsersPage() {
  const [reloadKey, setReloadKey] = useState(0);
  const reload = () => setReloadKey((k) => k + 1);
  const [form, setForm] = useState({ name: "", password: "", tags: "" });
  const columns: Column<User>[] = [
    {
      label: "Name",
      sort: "name",
      render: (u) => (
        <a class="user-link" href={href("users", u.name)}>
          {u.name}
        </a>
      ),
    },
    { label: "Tags", render: (u) => tags(u.tags) },
    {
      label: "",
      render: (u) => (
        <button
          class="danger delete-user"
          data-user={u.name}
          onClick={() => act(() => api.deleteUser(u.name), `User ${u.name} deleted`).then(reload)}
        >
          Delete
        </button>
      ),
    },
  ];
  const add = async (e: Event) => {
    e.preventDefault();
    if (await act(() => api.putUser(form.name, form.password, form.tags), `User ${form.name} saved`)) reload();
  };
  return (
    <div>
      <h1>Users</h1>
      <ServerTable what="users" load={api.users} columns={columns} rowKey={(u) => u.name} reloadKey={reloadKey} />
      <Section title="Add / update a user">
        <form class="form" id="add-user" onSubmit={add}>
          <Field label="Username" form={form} set={setForm} name="name" />
          <Field label="Password" form={form} set={setForm} name="password" type="password" />
          <Field
            label="Tags"
            form={form}
            set={setForm}
            name="tags"
            placeholder="administrator, monitoring, policymaker, management"
          />
          <button type="submit">Add user</button>
        </form>
      </Section>
      <Permissions reloadKey={reloadKey} />
    </div>
  );
}

function Permissions({ reloadKey }: { reloadKey: number }) {
  const permissions = usePoll(() => api.permissions(), [reloadKey]);
  const [form, setForm] = useState({ user: "", vhost: "/", configure: ".*", write: ".*", read: ".*" });
  const set = async (e: Event) => {
    e.preventDefault();
    await act(() => api.putPermission(form), `Permissions of ${form.user} in ${form.vhost} set`);
    permissions.reload();
  };
  return (
    <Section title="Permissions">
      <ErrorBox error={permissions.error} />
      <table class="list">
        <thead>
          <tr>
            <th>User</th>
            <th>Virtual host</th>
            <th>Configure</th>
            <th>Write</th>
            <th>Read</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(permissions.data ?? []).map((p) => (
            <tr key={`${p.user}\u0000${p.vhost}`}>
              <td>{p.user}</td>
              <td>{p.vhost}</td>
              <td>{p.configure}</td>
              <td>{p.write}</td>
              <td>{p.read}</td>
              <td>
                <button
                  class="danger"
                  onClick={() => act(() => api.deletePermission(p.vhost, p.user), "Permissions cleared").then(permissions.reload)}
                >
                  Clear
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <form class="form" id="set-permission" onSubmit={set}>
        <Field label="User" form={form} set={setForm} name="user" />
        <VhostChoice form={form} set={setForm} />
        <Field label="Configure regexp" form={form} set={setForm} name="configure" />
        <Field label="Write regexp" form={form} set={setForm} name="write" />
        <Field label="Read regexp" form={form} set={setForm} name="read" />
        <button type="submit">Set permission</button>
      </form>
    </Section>
  );
}
