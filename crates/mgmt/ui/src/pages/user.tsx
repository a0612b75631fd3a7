// #/users/{name} — one user: its tags and permissions, and its SQS access keys (list, add,
// revoke; docs/sqs.md "Access keys"). A new key's secret is shown once, from the POST's answer:
// the API lists ids and dates only, so the secret cannot be shown again.
import { useRef, useState } from "preact/hooks";
import { isAdmin } from "../access";
import { api } from "../api";
import { act, ErrorBox, notFound, Section, usePoll } from "../components";
import { clock, tags } from "../format";
import type { NewAccessKey } from "../types";
import { VhostChoice } from "./vhosts";

export function UserPage({ name }: { name: string }) {
  if (!isAdmin())
    return (
      <div>
        <h1>
          User <span class="name">{name}</span>
        </h1>
        <p class="read-only" id="users-admin-only">
          Users, their permissions and access keys are seen and changed by administrators only (the administrator tag).
        </p>
      </div>
    );
  return <AdminUserPage name={name} />;
}

function AdminUserPage({ name }: { name: string }) {
  const user = usePoll(() => api.user(name), [name]);
  const error = notFound(user.error, `No user ${name}: it does not exist, or was deleted.`);
  const shown = user.data !== null && user.error === null;
  return (
    <div>
      <h1>
        User <span class="name">{name}</span>
      </h1>
      <p>
        <a href="#/users">All users</a>
      </p>
      <ErrorBox error={error} />
      {shown && user.data && (
        <div>
          <table class="kv" id="user-details">
            <tbody>
              <tr>
                <th>Tags</th>
                <td>{tags(user.data.tags) || <span class="muted">none</span>}</td>
              </tr>
            </tbody>
          </table>
          <UserPermissions name={name} />
          <AccessKeys user={name} />
        </div>
      )}
    </div>
  );
}

function UserPermissions({ name }: { name: string }) {
  const permissions = usePoll(() => api.userPermissions(name), [name]);
  return (
    <Section title="Permissions" id="user-permissions">
      <ErrorBox error={permissions.error} />
      <table class="list">
        <thead>
          <tr>
            <th>Virtual host</th>
            <th>Configure</th>
            <th>Write</th>
            <th>Read</th>
          </tr>
        </thead>
        <tbody>
          {(permissions.data ?? []).map((p) => (
            <tr key={p.vhost}>
              <td>{p.vhost}</td>
              <td>{p.configure}</td>
              <td>{p.write}</td>
              <td>{p.read}</td>
            </tr>
          ))}
          {permissions.data && permissions.data.length === 0 && (
            <tr>
              <td colSpan={4} class="muted">
                no permissions
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <p class="muted">
        Set and clear permissions on the <a href="#/users">users page</a>.
      </p>
    </Section>
  );
}

function AccessKeys({ user }: { user: string }) {
  const keys = usePoll(() => api.accessKeys(user), [user]);
  const [form, setForm] = useState({ vhost: "/" });
  // The key just made, with its secret: kept only in this page's state, until hidden, revoked
  // or the page is left.
  const [made, setMade] = useState<NewAccessKey | null>(null);
  const add = async (e: Event) => {
    e.preventDefault();
    // A refused request leaves the secret shown before (if any) where it is; a new key replaces it.
    const ok = await act(
      async () => setMade(await api.addAccessKey(user, form.vhost)),
      `Access key made for ${user}: copy its secret now, it is shown only once`,
    );
    if (ok) keys.reload();
  };
  const revoke = async (id: string) => {
    if (await act(() => api.revokeAccessKey(user, id), `Access key ${id} of ${user} revoked`)) {
      if (made?.access_key_id === id) setMade(null);
    }
    keys.reload();
  };
  return (
    <Section title="Access keys (SQS)" id="user-access-keys">
      <p class="muted">
        Keys for the SQS endpoint (docs/sqs.md): a request signed with one acts as {user}, with {user}'s permissions in
        the key's virtual host. A user holds at most 2 keys: to rotate, add the new one, move the clients to it, then
        revoke the old one.
      </p>
      {made && <NewKey made={made} hide={() => setMade(null)} />}
      <ErrorBox error={keys.error} />
      <table class="list" id="access-keys">
        <thead>
          <tr>
            <th>Access key id</th>
            <th>Virtual host</th>
            <th>Created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(keys.data ?? []).map((k) => (
            <tr key={k.access_key_id} data-key={k.access_key_id}>
              <td>
                <code>{k.access_key_id}</code>
              </td>
              <td>{k.vhost ?? "/"}</td>
              <td>{clock(k.created_ms)}</td>
              <td>
                <button class="danger revoke-key" data-key={k.access_key_id} onClick={() => revoke(k.access_key_id)}>
                  Revoke
                </button>
              </td>
            </tr>
          ))}
          {keys.data && keys.data.length === 0 && (
            <tr>
              <td colSpan={4} class="muted">
                no access keys
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <form class="form inline" id="add-access-key" onSubmit={add}>
        <VhostChoice form={form} set={setForm} />
        <button type="submit">Add access key</button>
      </form>
    </Section>
  );
}

/** The new key's id and secret, shown this once, each with a Copy button. */
function NewKey({ made, hide }: { made: NewAccessKey; hide: () => void }) {
  return (
    <div class="new-key" id="new-access-key">
      <p>
        <b>Copy the secret access key now: it will not be shown again.</b> The broker keeps it sealed and shows it
        nowhere else, here or in the API; if it is lost, revoke the key and add a new one.
      </p>
      <table class="kv">
        <tbody>
          <tr>
            <th>Access key id</th>
            <td>
              <Copyable id="new-key-id" text={made.access_key_id} />
            </td>
          </tr>
          <tr>
            <th>Secret access key</th>
            <td>
              <Copyable id="new-key-secret" text={made.secret_access_key} />
            </td>
          </tr>
          <tr>
            <th>Virtual host</th>
            <td>{made.vhost ?? "/"}</td>
          </tr>
        </tbody>
      </table>
      <button id="hide-new-key" onClick={hide}>
        I have copied it: hide the secret
      </button>
    </div>
  );
}

/**
 * A value selected whole by one click, and a Copy button: the clipboard where the browser allows
 * it (a secure context: https or loopback), else the value is selected for Ctrl+C.
 */
function Copyable({ id, text }: { id: string; text: string }) {
  const ref = useRef<HTMLElement>(null);
  const [note, setNote] = useState("");
  const select = () => {
    const selection = getSelection();
    if (!ref.current || !selection) return;
    selection.selectAllChildren(ref.current);
  };
  const copy = async () => {
    try {
      if (!navigator.clipboard) throw new Error("no clipboard");
      await navigator.clipboard.writeText(text);
      setNote("copied");
    } catch {
      select();
      setNote("selected: press Ctrl+C to copy");
    }
  };
  return (
    <span>
      <code class="copyable" id={id} ref={ref} onClick={select}>
        {text}
      </code>{" "}
      <button type="button" class="copy" onClick={copy}>
        Copy
      </button>{" "}
      <span class="muted">{note}</span>
    </span>
  );
}
