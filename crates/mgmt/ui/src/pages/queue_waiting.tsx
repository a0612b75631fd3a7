// A queue's "what is waiting, and when": the timeline, the delayed messages (cancel,
// reschedule, one by one or all with a message id) and the deliveries in flight under a
// visibility timeout.
import { useState } from "preact/hooks";
import { may, refusedTitle } from "../access";
import { api, ApiError } from "../api";
import { act, ErrorBox, Section, usePoll } from "../components";
import { bytes, clock, duration, num } from "../format";
import { Timeline } from "../timeline";
import type { DelayedMessage, InFlight, Queue } from "../types";

/** How many delayed messages / in-flight deliveries the page lists. */
const WAITING_SHOWN = 100;

/** A queue setting from its arguments, else from its effective policy. */
export function setting(q: Queue, arg: string, policyKey: string): unknown {
  return q.arguments?.[arg] ?? q.effective_policy_definition?.[policyKey];
}

export function Waiting({ q, reloadQueue }: { q: Queue; reloadQueue: () => void }) {
  // Listing them needs read permission on the queue: without it, nothing is asked (and refused).
  const readable = may("read", q.vhost, q.name);
  const delayed = usePoll(
    () => (readable ? api.delayed(q.vhost, q.name, WAITING_SHOWN) : Promise.resolve([])),
    [q.vhost, q.name, readable],
  );
  const inFlight = usePoll(
    () => (readable ? api.inFlight(q.vhost, q.name, WAITING_SHOWN) : Promise.resolve({ deliveries: [], total: 0 })),
    [q.vhost, q.name, readable],
  );
  const ttl = setting(q, "x-message-ttl", "message-ttl");
  const now = Date.now();
  const reload = () => {
    delayed.reload();
    reloadQueue();
  };
  return (
    <Section title="What is waiting, and when" id="waiting">
      <Timeline
        data={{
          now,
          delayed: (delayed.data ?? []).map((d) => now + d.due_in_ms),
          inFlight: (inFlight.data?.deliveries ?? []).map((d) => now + d.visible_in_ms),
          expiries:
            q.next_expiry_ms !== null && q.last_expiry_ms !== null
              ? { first: q.next_expiry_ms, last: q.last_expiry_ms, count: q.messages_with_ttl }
              : null,
          delayedTotal: q.messages_delayed,
          inFlightTotal: inFlight.data?.total ?? 0,
        }}
      />
      <p class="muted" id="waiting-summary">
        Next delayed message due: {q.next_due_ms ? `${clock(q.next_due_ms)} (in ${duration(q.next_due_ms - now)})` : "none"}
        . Message TTL: {typeof ttl === "number" ? duration(ttl) : "none"}
        {q.next_expiry_ms !== null && q.last_expiry_ms !== null
          ? `; ${num(q.messages_with_ttl)} ready messages expire from ${clock(q.next_expiry_ms)} (in ${duration(
              q.next_expiry_ms - now,
            )}) to ${clock(q.last_expiry_ms)} unless consumed`
          : ""}
        ; expired so far: {num(q.messages_expired)}.
        Expiry of the queue itself (x-expires): {String(setting(q, "x-expires", "expires") ?? "none")}.
      </p>
      {!readable && (
        <p class="read-only" id="waiting-unreadable">
          Listing this queue's delayed messages and deliveries in flight needs read permission on it.
        </p>
      )}
      <h3>Delayed messages ({num(q.messages_delayed)})</h3>
      <ErrorBox error={delayed.error} />
      <DelayedTable q={q} messages={delayed.data ?? []} loaded={delayed.data !== null} reload={reload} />
      <ByMessageId q={q} reload={reload} />
      <h3>In flight under a visibility timeout ({num(inFlight.data?.total ?? 0)})</h3>
      <ErrorBox error={inFlight.error} />
      <InFlightTable q={q} inFlight={inFlight.data} reload={inFlight.reload} />
    </Section>
  );
}

function DelayedTable(props: { q: Queue; messages: DelayedMessage[]; loaded: boolean; reload: () => void }) {
  const { q, reload } = props;
  const [delays, setDelays] = useState<Record<number, string>>({});
  const allowed = may("read", q.vhost, q.name);
  const why = allowed ? undefined : refusedTitle("change this queue's delayed messages (needs read permission)");
  const cancel = (id: number) =>
    act(() => api.cancelDelayed(q.vhost, q.name, id), `Delayed message ${id} cancelled`).then(reload);
  const reschedule = (id: number) => {
    const seconds = Number(delays[id] ?? "0");
    return act(
      () => api.rescheduleDelayed(q.vhost, q.name, id, Math.max(0, Math.round(seconds * 1000))),
      `Delayed message ${id} now due in ${duration(seconds * 1000)}`,
    ).then(reload);
  };
  return (
    <table class="list" id="delayed-messages">
      <thead>
        <tr>
          <th>Id</th>
          <th>Due</th>
          <th>In</th>
          <th>Routing key</th>
          <th>Message id</th>
          <th>Payload</th>
          <th>Actions</th>
        </tr>
      </thead>
      <tbody>
        {props.messages.map((d) => (
          <tr key={d.id} data-id={d.id}>
            <td>{d.id}</td>
            <td>{clock(d.due_ms)}</td>
            <td>{duration(d.due_in_ms)}</td>
            <td>{d.routing_key}</td>
            <td class="message-id">{messageId(d)}</td>
            <td class="payload">{preview(d.payload, d.payload_bytes)}</td>
            <td class="actions">
              <button class="cancel" disabled={!allowed} title={why} onClick={() => cancel(d.id)}>
                Cancel
              </button>{" "}
              <input
                class="delay"
                type="number"
                min="0"
                step="1"
                placeholder="seconds"
                value={delays[d.id] ?? ""}
                onInput={(e) => setDelays({ ...delays, [d.id]: (e.target as HTMLInputElement).value })}
              />{" "}
              <button class="reschedule" disabled={!allowed} title={why} onClick={() => reschedule(d.id)}>
                Reschedule
              </button>
            </td>
          </tr>
        ))}
        {props.loaded && props.messages.length === 0 && (
          <tr>
            <td colSpan={7} class="muted">
              no delayed messages
            </td>
          </tr>
        )}
      </tbody>
    </table>
  );
}

/** A delayed message's AMQP `message_id` property, "" when it has none. */
function messageId(d: DelayedMessage): string {
  const id = d.properties?.message_id;
  return id === undefined || id === null ? "" : typeof id === "string" ? id : JSON.stringify(id);
}

/** The API's 404 for a message id no delayed message of the queue has, said as such. */
function byMessageIdRefusal(e: unknown, id: string): unknown {
  return e instanceof ApiError && e.status === 404 ? new Error(`no delayed message has message id ${id}`) : e;
}

/**
 * Cancel or reschedule every delayed message of the queue with one `message_id` (the API's
 * `DELETE` / `POST …/delayed?message_id=…`), listed here or not; the reschedule as the
 * per-message one (in N seconds, 0 or nothing = ready now).
 */
function ByMessageId({ q, reload }: { q: Queue; reload: () => void }) {
  const [id, setId] = useState("");
  const [seconds, setSeconds] = useState("");
  const allowed = may("read", q.vhost, q.name);
  const why = allowed ? undefined : refusedTitle("change this queue's delayed messages (needs read permission)");
  const plural = (n: number) => `${num(n)} delayed message${n === 1 ? "" : "s"}`;
  const cancel = () =>
    act(
      () => api.cancelDelayedByMessageId(q.vhost, q.name, id).catch((e) => Promise.reject(byMessageIdRefusal(e, id))),
      (r) => `Message id ${id}: cancelled ${plural(r.cancelled)}`,
    ).then(reload);
  const reschedule = () => {
    const ms = Math.max(0, Math.round(Number(seconds || "0") * 1000));
    return act(
      () =>
        api
          .rescheduleDelayedByMessageId(q.vhost, q.name, id, ms)
          .catch((e) => Promise.reject(byMessageIdRefusal(e, id))),
      (r) => `Message id ${id}: rescheduled ${plural(r.rescheduled)}, ${ms === 0 ? "due now" : `now due in ${duration(ms)}`}`,
    ).then(reload);
  };
  const none = id === "" ? "Type a message id first" : undefined;
  return (
    <form class="form inline" id="delayed-by-message-id" onSubmit={(e) => e.preventDefault()}>
      <label class="field">
        <span>By message id</span>
        <input
          name="message_id"
          placeholder="message_id property"
          value={id}
          disabled={!allowed}
          onInput={(e) => setId((e.target as HTMLInputElement).value)}
        />
      </label>
      <button type="button" class="cancel-by-id" disabled={!allowed || id === ""} title={why ?? none} onClick={cancel}>
        Cancel all with this message id
      </button>
      <input
        class="delay"
        name="delay"
        type="number"
        min="0"
        step="1"
        placeholder="seconds"
        value={seconds}
        disabled={!allowed}
        onInput={(e) => setSeconds((e.target as HTMLInputElement).value)}
      />
      <button
        type="button"
        class="reschedule-by-id"
        disabled={!allowed || id === ""}
        title={why ?? none ?? "Due this many seconds from now (0 or empty: ready now)"}
        onClick={reschedule}
      >
        Reschedule all with this message id
      </button>
    </form>
  );
}

/** The visibility "Set visibility" gives when no number is typed: 30 s, SQS's default timeout. */
const DEFAULT_EXTEND_S = 30;

function InFlightTable(props: { q: Queue; inFlight: InFlight | null; reload: () => void }) {
  const { q, inFlight } = props;
  const [seconds, setSeconds] = useState<Record<string, string>>({});
  const allowed = may("read", q.vhost, q.name);
  // Sets the delivery's visibility to N s from now (the API's change_visibility; 0 = back now).
  const extend = (handle: string, tag: number) => {
    const s = Number(seconds[handle] || DEFAULT_EXTEND_S);
    return act(
      () => api.changeVisibility(q.vhost, q.name, handle, Math.max(0, Math.round(s * 1000))),
      `Delivery ${tag} now comes back in ${duration(s * 1000)}`,
    ).then(props.reload);
  };
  return (
    <table class="list" id="in-flight">
      <thead>
        <tr>
          <th>Channel</th>
          <th>Delivery tag</th>
          <th>Returns at</th>
          <th>In</th>
          <th>Visibility</th>
        </tr>
      </thead>
      <tbody>
        {(inFlight?.deliveries ?? []).map((d) => {
          const handle = d.receipt_handle;
          return (
            <tr key={`${d.channel}/${d.delivery_tag}`} data-handle={handle ?? undefined}>
              <td>{d.channel ?? "?"}</td>
              <td>{d.delivery_tag}</td>
              <td>{clock(d.visible_at_ms)}</td>
              <td>{duration(d.visible_in_ms)}</td>
              {handle === null ? (
                <td class="consumer-timeout muted" title="The consumer is cancelled when it runs out">
                  consumer timeout {duration(d.consumer_timeout ?? 0)}
                </td>
              ) : (
                <td class="actions">
                  <input
                    class="visibility"
                    type="number"
                    min="0"
                    step="1"
                    placeholder={`${DEFAULT_EXTEND_S} s`}
                    value={seconds[handle] ?? ""}
                    disabled={!allowed}
                    onInput={(e) => setSeconds({ ...seconds, [handle]: (e.target as HTMLInputElement).value })}
                  />{" "}
                  <button
                    class="extend"
                    disabled={!allowed}
                    title={allowed ? "Keep it invisible this many seconds from now (0: back at once)" : refusedTitle("change visibility here")}
                    onClick={() => extend(handle, d.delivery_tag)}
                  >
                    Set visibility
                  </button>
                </td>
              )}
            </tr>
          );
        })}
        {inFlight?.deliveries.length === 0 && (
          <tr>
            <td colSpan={5} class="muted">
              none
            </td>
          </tr>
        )}
      </tbody>
    </table>
  );
}

function preview(b64: string, size: number): string {
  let text: string;
  try {
    const binary = atob(b64);
    text = new TextDecoder("utf-8", { fatal: false }).decode(Uint8Array.from(binary, (c) => c.charCodeAt(0)));
  } catch {
    text = "";
  }
  return text.length > 60 ? `${text.slice(0, 60)}… (${bytes(size)})` : `${text} (${bytes(size)})`;
}

