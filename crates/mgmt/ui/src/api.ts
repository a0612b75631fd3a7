// The one API client: every call goes through `request`, which sends the logged-in user's Basic
// credentials and `X-Requested-With` (so a failed login answers without the browser's prompt).
import type {
  AccessKey, Binding, Channel, Connection, Consumer, DelayedMessage, Exchange, GotMessage, InFlight, Node,
  NewAccessKey, Overview, Page, Permission, Policy, Queue, User, Vhost, Whoami,
} from "./types";

const AUTH_KEY = "hourglass.auth";

export class ApiError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

/** Basic credentials for `user:password`, UTF-8 encoded as browsers do. */
export function basic(user: string, password: string): string {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = "";
  bytes.forEach((b) => (binary += String.fromCharCode(b)));
  return `Basic ${btoa(binary)}`;
}

export function credentials(): string | null {
  return sessionStorage.getItem(AUTH_KEY);
}

export function saveCredentials(value: string | null): void {
  if (value === null) sessionStorage.removeItem(AUTH_KEY);
  else sessionStorage.setItem(AUTH_KEY, value);
}

/** Called when a request finds the credentials no longer accepted (e.g. the user was deleted). */
let onLoggedOut: () => void = () => {};
export function setLoggedOutHandler(handler: () => void): void {
  onLoggedOut = handler;
}

export async function request<T>(
  method: string,
  path: string,
  body?: unknown,
  extraHeaders: Record<string, string> = {},
  auth: string | null = credentials(),
): Promise<T> {
  const headers: Record<string, string> = { "X-Requested-With": "XMLHttpRequest", ...extraHeaders };
  if (auth) headers.Authorization = auth;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`api${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await response.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    const error = json as { error?: string; reason?: string } | null;
    const reason = error?.reason ?? (text || response.statusText);
    if (response.status === 401 && error?.error === "not_authorized" && auth === credentials()) onLoggedOut();
    throw new ApiError(response.status, `${response.status} ${error?.error ?? ""}: ${reason}`.trim());
  }
  return json as T;
}

const enc = encodeURIComponent;
const get = <T>(path: string) => request<T>("GET", path);

/** Query string for a server-side listing. */
export interface ListQuery {
  page: number;
  page_size: number;
  name?: string;
  sort?: string;
  sort_reverse?: boolean;
}

function listPath(base: string, q: ListQuery): string {
  const params = new URLSearchParams({ page: String(q.page), page_size: String(q.page_size) });
  if (q.name) params.set("name", q.name);
  if (q.sort) params.set("sort", q.sort);
  if (q.sort_reverse) params.set("sort_reverse", "true");
  return `${base}?${params}`;
}

export const api = {
  whoami: (auth: string) => request<Whoami>("GET", "/whoami", undefined, {}, auth),
  overview: () => get<Overview>("/overview"),
  /** The overview with the broker's samples of the last ten minutes, every 5 s. */
  overviewWithSamples: () => get<Overview>("/overview?msg_rates_age=600&msg_rates_incr=5"),
  nodes: () => get<Node[]>("/nodes"),
  exportDefinitions: () => get<unknown>("/definitions"),
  importDefinitions: (defs: unknown) => request<void>("POST", "/definitions", defs),

  queues: (q: ListQuery) => get<Page<Queue>>(listPath("/queues", q)),
  queue: (vhost: string, name: string) => get<Queue>(`/queues/${enc(vhost)}/${enc(name)}`),
  declareQueue: (vhost: string, name: string, body: unknown) =>
    request<void>("PUT", `/queues/${enc(vhost)}/${enc(name)}`, body),
  deleteQueue: (vhost: string, name: string) => request<void>("DELETE", `/queues/${enc(vhost)}/${enc(name)}`),
  purgeQueue: (vhost: string, name: string) =>
    request<void>("DELETE", `/queues/${enc(vhost)}/${enc(name)}/contents`),
  getMessages: (vhost: string, name: string, body: unknown) =>
    request<GotMessage[]>("POST", `/queues/${enc(vhost)}/${enc(name)}/get`, body),
  queueBindings: (vhost: string, name: string) => get<Binding[]>(`/queues/${enc(vhost)}/${enc(name)}/bindings`),
  delayed: (vhost: string, name: string, limit: number) =>
    get<DelayedMessage[]>(`/queues/${enc(vhost)}/${enc(name)}/delayed?limit=${limit}&truncate=200`),
  cancelDelayed: (vhost: string, name: string, id: number) =>
    request<void>("DELETE", `/queues/${enc(vhost)}/${enc(name)}/delayed/${id}`),
  rescheduleDelayed: (vhost: string, name: string, id: number, delayMs: number) =>
    request<void>("POST", `/queues/${enc(vhost)}/${enc(name)}/delayed/${id}`, { delay_ms: delayMs }),
  cancelDelayedByMessageId: (vhost: string, name: string, messageId: string) =>
    request<{ cancelled: number }>("DELETE", `/queues/${enc(vhost)}/${enc(name)}/delayed?message_id=${enc(messageId)}`),
  rescheduleDelayedByMessageId: (vhost: string, name: string, messageId: string, delayMs: number) =>
    request<{ rescheduled: number }>(
      "POST",
      `/queues/${enc(vhost)}/${enc(name)}/delayed?message_id=${enc(messageId)}`,
      { delay_ms: delayMs },
    ),
  inFlight: (vhost: string, name: string, limit: number) =>
    get<InFlight>(`/queues/${enc(vhost)}/${enc(name)}/in-flight?limit=${limit}`),
  changeVisibility: (vhost: string, name: string, receiptHandle: string, timeoutMs: number) =>
    request<void>("POST", `/queues/${enc(vhost)}/${enc(name)}/visibility`, {
      receipt_handle: receiptHandle,
      timeout_ms: timeoutMs,
    }),
  consumers: (vhost: string) => get<Consumer[]>(`/consumers/${enc(vhost)}`),

  exchanges: (q: ListQuery) => get<Page<Exchange>>(listPath("/exchanges", q)),
  exchange: (vhost: string, name: string) => get<Exchange>(`/exchanges/${enc(vhost)}/${enc(name || "amq.default")}`),
  declareExchange: (vhost: string, name: string, body: unknown) =>
    request<void>("PUT", `/exchanges/${enc(vhost)}/${enc(name)}`, body),
  deleteExchange: (vhost: string, name: string) => request<void>("DELETE", `/exchanges/${enc(vhost)}/${enc(name)}`),
  publish: (vhost: string, exchange: string, body: unknown) =>
    request<{ routed: boolean }>("POST", `/exchanges/${enc(vhost)}/${enc(exchange || "amq.default")}/publish`, body),
  bindingsFrom: (vhost: string, name: string) =>
    get<Binding[]>(`/exchanges/${enc(vhost)}/${enc(name || "amq.default")}/bindings/source`),
  bindingsTo: (vhost: string, name: string) =>
    get<Binding[]>(`/exchanges/${enc(vhost)}/${enc(name || "amq.default")}/bindings/destination`),
  bind: (vhost: string, source: string, destType: "q" | "e", dest: string, routingKey: string) =>
    request<void>("POST", `/bindings/${enc(vhost)}/e/${enc(source)}/${destType}/${enc(dest)}`, {
      routing_key: routingKey,
      arguments: {},
    }),
  unbind: (b: Binding) =>
    request<void>(
      "DELETE",
      `/bindings/${enc(b.vhost)}/e/${enc(b.source)}/${b.destination_type === "queue" ? "q" : "e"}/${enc(
        b.destination,
      )}/${enc(b.properties_key)}`,
    ),

  connections: (q: ListQuery) => get<Page<Connection>>(listPath("/connections", q)),
  closeConnection: (name: string) =>
    request<void>("DELETE", `/connections/${enc(name)}`, undefined, { "X-Reason": "Closed via management UI" }),
  channels: (q: ListQuery) => get<Page<Channel>>(listPath("/channels", q)),

  users: (q: ListQuery) => get<Page<User>>(listPath("/users", q)),
  putUser: (name: string, password: string, tags: string) =>
    request<void>("PUT", `/users/${enc(name)}`, { password, tags }),
  deleteUser: (name: string) => request<void>("DELETE", `/users/${enc(name)}`),
  user: (name: string) => get<User>(`/users/${enc(name)}`),
  userPermissions: (name: string) => get<Permission[]>(`/users/${enc(name)}/permissions`),
  accessKeys: (user: string) => get<AccessKey[]>(`/users/${enc(user)}/access-keys`),
  addAccessKey: (user: string, vhost: string) =>
    request<NewAccessKey>("POST", `/users/${enc(user)}/access-keys`, { vhost }),
  revokeAccessKey: (user: string, id: string) =>
    request<void>("DELETE", `/users/${enc(user)}/access-keys/${enc(id)}`),
  permissions: () => get<Permission[]>("/permissions"),
  putPermission: (p: Permission) =>
    request<void>("PUT", `/permissions/${enc(p.vhost)}/${enc(p.user)}`, {
      configure: p.configure,
      write: p.write,
      read: p.read,
    }),
  deletePermission: (vhost: string, user: string) => request<void>("DELETE", `/permissions/${enc(vhost)}/${enc(user)}`),

  vhosts: (q: ListQuery) => get<Page<Vhost>>(listPath("/vhosts", q)),
  vhostNames: () => get<Vhost[]>("/vhosts?columns=name"),
  putVhost: (name: string, description: string) => request<void>("PUT", `/vhosts/${enc(name)}`, { description }),
  deleteVhost: (name: string) => request<void>("DELETE", `/vhosts/${enc(name)}`),
  setTracing: (name: string, tracing: boolean) => request<void>("PUT", `/vhosts/${enc(name)}`, { tracing }),

  policies: (q: ListQuery) => get<Page<Policy>>(listPath("/policies", q)),
  putPolicy: (p: Policy) =>
    request<void>("PUT", `/policies/${enc(p.vhost)}/${enc(p.name)}`, {
      pattern: p.pattern,
      definition: p.definition,
      priority: p.priority,
      "apply-to": p["apply-to"],
    }),
  deletePolicy: (vhost: string, name: string) => request<void>("DELETE", `/policies/${enc(vhost)}/${enc(name)}`),
};
