// A queue's "what is waiting, and when": the timeline, the delayed messages (cancel,
// reschedule) and the deliveries in flight under a visibility timeout.
import { useState } from "preact/hooks";
import { api } from "../api";
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
  const delayed = usePoll(() => api.delayed(q.vhost, q.name, WAITING_SHOWN), [q.vhost, q.name]);
  const inFlight = usePoll(() => api.inFlight(q.vhost, q.name, WAITING_SHOWN), [q.vhost, q.name]);
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
      <h3>Delayed messages ({num(q.messages_delayed)})</h3>
      <ErrorBox error={delayed.error} />
      <DelayedTable q={q} messages={delayed.data ?? []} loaded={delayed.data !== null} reload={reload} />
      <h3>In flight under a visibility timeout ({num(inFlight.data?.total ?? 0)})</h3>
      <ErrorBox error={inFlight.error} />
      <InFlightTable inFlight={inFlight.data} />
    </Section>
  );
}

function DelayedTable(props: { q: Queue; messages: DelayedMessage[]; loaded: boolean; reload: () => void }) {
  const { q, reload } = props;
  const [delays, setDelays] = useState<Record<number, string>>({});
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
            <td class="payload">{preview(d.payload, d.payload_bytes)}</td>
            <td class="actions">
              <button class="cancel" onClick={() => cancel(d.id)}>
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
              <button class="reschedule" onClick={() => reschedule(d.id)}>
                Reschedule
              </button>
            </td>
          </tr>
        ))}
        {props.loaded && props.messages.length === 0 && (
          <tr>
            <td colSpan={6} class="muted">
              no delayed messages
            </td>
          </tr>
        )}
      </tbody>
    </table>
  );
}

function InFlightTable({ inFlight }: { inFlight: InFlight | null }) {
  return (
    <table class="list" id="in-flight">
      <thead>
        <tr>
          <th>Channel</th>
          <th>Delivery tag</th>
          <th>Returns at</th>
          <th>In</th>
        </tr>
      </thead>
      <tbody>
        {(inFlight?.deliveries ?? []).map((d) => (
          <tr key={d.receipt_handle}>
            <td>{d.channel ?? "?"}</td>
            <td>{d.delivery_tag}</td>
            <td>{clock(d.visible_at_ms)}</td>
            <td>{duration(d.visible_in_ms)}</td>
          </tr>
        ))}
        {inFlight?.deliveries.length === 0 && (
          <tr>
            <td colSpan={4} class="muted">
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

