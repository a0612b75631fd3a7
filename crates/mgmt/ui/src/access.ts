// What the logged-in user may do, so the UI hides or disables what the API would refuse
// (docs/ui.md "Login and permissions"). The API still decides: this only spares the refusal.
import type { Whoami, WhoamiPermission } from "./types";

let who: Whoami | null = null;

export function setUser(w: Whoami | null): void {
  who = w;
}

export function userTags(): string[] {
  if (!who) return [];
  return Array.isArray(who.tags) ? who.tags : who.tags.split(",").map((t) => t.trim());
}

/** The administrator tag: users, vhosts, definitions, everyone's connections. */
export function isAdmin(): boolean {
  return userTags().includes("administrator");
}

/** Policies need administrator or policymaker (RabbitMQ's rule). */
export function mayManagePolicies(): boolean {
  const t = userTags();
  return t.includes("administrator") || t.includes("policymaker");
}

/** Closing a connection: an administrator closes any, others their own. */
export function mayClose(owner: string): boolean {
  return isAdmin() || (who !== null && who.name === owner);
}

/**
 * Whether the user's permission in `vhost` lets it `kind` the resource `name` (configure to
 * declare or delete, write to publish, read to consume, get, purge). An empty pattern grants
 * nothing; the default exchange is `amq.default`, as RabbitMQ checks it.
 */
export function may(kind: "configure" | "write" | "read", vhost: string, name: string): boolean {
  const entry: WhoamiPermission | undefined = who?.permissions?.find((p) => p.vhost === vhost);
  if (!who?.permissions) return true; // an older API without them: let the API decide
  if (!entry || entry[kind] === "") return false;
  try {
    return new RegExp(entry[kind]).test(name || "amq.default");
  } catch {
    return true;
  }
}

/** The tooltip on a disabled button. */
export function refusedTitle(what: string): string {
  return `${who?.name ?? "This user"} may not ${what}`;
}
