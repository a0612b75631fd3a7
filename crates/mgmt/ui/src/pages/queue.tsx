// #/queues/{vhost}/{name} — one queue: counts and rates, what waits and when (queue_waiting.tsx),
// arguments and policy, dead-lettering, consumers, bindings, get / publish / purge / delete.
import { useState } from "preact/hooks";
import { api } from "../api";
import { may, refusedTitle } from "../access";
import { act, ArgsTable, Choice, ErrorBox, notFound, Section, usePoll } from "../components";
import { bytes, duration, num, rate } from "../format";
import { go, href } from "../router";
import type { Args, EffectiveSettings, Queue } from "../types";
import { GetMessages, PublishForm } from "./messages";
import { setting, Waiting } from "./queue_waiting";

export function QueuePage({ vhost, name }: { vhost: string; name: string }) {
  const queue = usePoll(() => api.queue(vhost, name), [vhost, name]);
  const q = queue.data;
  return (
    <div>
      <h1>
        Queue <span class="name">{name}</span> <span class="muted">in {vhost}</span>
      </h1>
      <ErrorBox error={notFound(queue.error, `No queue ${name} in virtual host ${vhost}: it does not exist, or was deleted.`)} />
      {q && (
        <>
          <Counts q={q} />
          <Waiting q={q} reloadQueue={queue.reload} />
          <Details q={q} />
          <Consumers vhost={vhost} name={name} />
          <Bindings vhost={vhost} name={name} />
          <Section title="Get messages">
            <GetMessages vhost={vhost} queue={name} onDone={queue.reload} />
          </Section>
          <QueuePublish vhost={vhost} name={name} onDone={queue.reload} />
          <Danger vhost={vhost} name={name} reload={queue.reload} />
        </>
      )}
    </div>
  );
}

function Counts({ q }: { q: Queue }) {
  const s = q.message_stats ?? {};
  const cell = (label: string, value: string, sub: string, cls: string) => (
    <div class={`total ${cls}`} data-count={cls}>
      <span class="value">{value}</span>
      <span class="label">{label}</span>
      <span class="sub">{sub}</span>
    </div>
  );
  return (
    <div>
      <div class="totals">
        {cell("Ready", num(q.messages_ready), rate(q.messages_ready_details?.rate), "ready")}
        {cell("Unacked", num(q.messages_unacknowledged), rate(q.messages_unacknowledged_details?.rate), "unacked")}
        {cell("Delayed", num(q.messages_delayed), bytes(q.message_bytes_delayed), "delayed")}
        {cell("Total", num(q.messages), `ready + unacked (not delayed), ${bytes(q.message_bytes)}`, "total")}
        {cell("Consumers", num(q.consumers), "", "consumers")}
      </div>
      <table class="kv rates">
        <tbody>
          <tr>
            <th>Publish</th>
            <td>{rate(s.publish_details?.rate)}</td>
            <th>Deliver / get</th>
            <td>{rate(s.deliver_get_details?.rate)}</td>
            <th>Ack</th>
            <td>{rate(s.ack_details?.rate)}</td>
            <th>Redeliver</th>
            <td>{rate(s.redeliver_details?.rate)}</td>
          </tr>
        </tbody>
      </table>
    </div>
  );
}

function Details({ q }: { q: Queue }) {
  return (
    <Section title="Details">
      <div class="columns">
        <div>
          <table class="kv">
            <tbody>
              <tr>
                <th>Type</th>
                <td>{q.type}</td>
              </tr>
              <tr>
                <th>Features</th>
                <td>
                  {q.durable ? "durable " : "transient "}
                  {q.auto_delete ? "auto-delete " : ""}
                  {q.exclusive ? "exclusive" : ""}
                </td>
              </tr>
              <tr>
                <th>Policy</th>
                <td>{q.policy ?? "none"}</td>
              </tr>
              <tr>
                <th>Operator policy</th>
                <td>{q.operator_policy ?? "none"}</td>
              </tr>
              <tr>
                <th>Redelivered</th>
                <td>{num(q.messages_redelivered)}</td>
              </tr>
              <tr>
                <th>Visibility timeouts run out</th>
                <td>{num(q.messages_visibility_expired)}</td>
              </tr>
              {q.messages_by_priority && (
                <tr id="by-priority">
                  <th>Ready by priority</th>
                  <td>
                    {Object.entries(q.messages_by_priority)
                      .sort((a, b) => Number(b[0]) - Number(a[0]))
                      .map(([p, n]) => `${p}: ${num(n)}`)
                      .join(", ") || "none"}
                  </td>
                </tr>
              )}
            </tbody>
          </table>
        </div>
        <div>
          <h3>Arguments</h3>
          <ArgsTable args={q.arguments} />
          <h3>Effective policy definition</h3>
          <ArgsTable args={q.effective_policy_definition as Args} />
          {q.effective_settings && <EffectiveSettingsTable s={q.effective_settings} />}
        </div>
        <DeadLettering q={q} />
      </div>
    </Section>
  );
}

/** The time settings the queue runs with, arguments and policies merged, defaults applied. */
function EffectiveSettingsTable({ s }: { s: EffectiveSettings }) {
  const ms = (v: number | null) => (v === null ? "none" : duration(v));
  const retry = s.delayed_retry;
  const rows: [string, string][] = [
    ["Message TTL", ms(s.message_ttl)],
    ["Delivery delay", ms(s.delivery_delay)],
    ["Visibility timeout", ms(s.visibility_timeout)],
    ["Consumer timeout", ms(s.consumer_timeout)],
    ["Delivery limit", s.delivery_limit === null ? "none" : num(s.delivery_limit)],
    ["Redelivery back-off", s.redelivery_delay === null ? "none" : `${duration(s.redelivery_delay)} doubling, at most ${ms(s.redelivery_delay_max)}`],
    [
      "Delayed retry",
      retry === null
        ? "disabled"
        : `${retry.type}: ${duration(retry.min)} × ${retry.multiplier === null ? "returns" : `${retry.multiplier}^(returns − 1)`}, at most ${duration(retry.max)}`,
    ],
  ];
  return (
    <>
      <h3>Time settings in effect</h3>
      <table class="kv" id="effective-settings">
        <tbody>
          {rows.map(([label, value]) => (
            <tr key={label} data-setting={label}>
              <th>{label}</th>
              <td>{value}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

function DeadLettering({ q }: { q: Queue }) {
  const dlx = setting(q, "x-dead-letter-exchange", "dead-letter-exchange");
  const dlk = setting(q, "x-dead-letter-routing-key", "dead-letter-routing-key");
  const d = q.messages_dead_lettered;
  return (
    <div id="dead-lettering">
      <h3>Dead-lettering</h3>
      <table class="kv">
        <tbody>
          <tr>
            <th>Target exchange</th>
            <td>
              {typeof dlx === "string" ? (
                <a href={href("exchanges", q.vhost, dlx || "amq.default")}>{dlx || "(default)"}</a>
              ) : (
                "none"
              )}
            </td>
          </tr>
          <tr>
            <th>Routing key</th>
            <td>{typeof dlk === "string" ? dlk : "the message's own"}</td>
          </tr>
          <tr>
            <th>Rejected</th>
            <td>{num(d.rejected)}</td>
          </tr>
          <tr>
            <th>Expired</th>
            <td>{num(d.expired)}</td>
          </tr>
          <tr>
            <th>Max length</th>
            <td>{num(d.maxlen)}</td>
          </tr>
          <tr>
            <th>Delivery limit</th>
            <td>{num(d.delivery_limit)}</td>
          </tr>
        </tbody>
      </table>
    </div>
  );
}

function Consumers({ vhost, name }: { vhost: string; name: string }) {
  const consumers = usePoll(
    async () => (await api.consumers(vhost)).filter((c) => c.queue.name === name),
    [vhost, name],
  );
  return (
    <Section title="Consumers" id="consumers">
      <ErrorBox error={consumers.error} />
      <table class="list">
        <thead>
          <tr>
            <th>Channel</th>
            <th>Consumer tag</th>
            <th>Ack required</th>
            <th>Exclusive</th>
            <th>Prefetch</th>
            <th>Consumer timeout</th>
          </tr>
        </thead>
        <tbody>
          {(consumers.data ?? []).map((c) => (
            <tr key={c.channel_details.name + c.consumer_tag}>
              <td>{c.channel_details.name}</td>
              <td>{c.consumer_tag}</td>
              <td>{c.ack_required ? "●" : "○"}</td>
              <td>{c.exclusive ? "●" : "○"}</td>
              <td>{c.prefetch_count}</td>
              <td>{c.consumer_timeout === null ? "none" : duration(c.consumer_timeout)}</td>
            </tr>
          ))}
          {consumers.data?.length === 0 && (
            <tr>
              <td colSpan={6} class="muted">
                no consumers
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </Section>
  );
}

function Bindings({ vhost, name }: { vhost: string; name: string }) {
  const bindings = usePoll(() => api.queueBindings(vhost, name), [vhost, name]);
  const [form, setForm] = useState({ exchange: "", key: "" });
  const add = async (e: Event) => {
    e.preventDefault();
    await act(() => api.bind(vhost, form.exchange, "q", name, form.key), "Binding added");
    bindings.reload();
  };
  return (
    <Section title="Bindings">
      <ErrorBox error={bindings.error} />
      <table class="list">
        <thead>
          <tr>
            <th>From exchange</th>
            <th>Routing key</th>
            <th>Arguments</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {(bindings.data ?? []).map((b) => (
            <tr key={b.source + b.properties_key}>
              <td>{b.source ? <a href={href("exchanges", vhost, b.source)}>{b.source}</a> : "(default exchange)"}</td>
              <td>{b.routing_key}</td>
              <td>{JSON.stringify(b.arguments)}</td>
              <td>
                {b.source && (
                  <button onClick={() => act(() => api.unbind(b), "Binding removed").then(bindings.reload)}>Unbind</button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <form class="form inline" onSubmit={add}>
        <input
          placeholder="from exchange"
          value={form.exchange}
          onInput={(e) => setForm({ ...form, exchange: (e.target as HTMLInputElement).value })}
        />
        <input
          placeholder="routing key"
          value={form.key}
          onInput={(e) => setForm({ ...form, key: (e.target as HTMLInputElement).value })}
        />
        <button type="submit">Bind</button>
      </form>
    </Section>
  );
}

/**
 * Publishing from a queue's page: to the default exchange (routing key = the queue's name), or
 * through one of the `x-delayed-message` exchanges bound to the queue with a delay — the only
 * place an `x-delay` header works (docs/semantics.md §3).
 */
function QueuePublish({ vhost, name, onDone }: { vhost: string; name: string; onDone: () => void }) {
  const delayedRoutes = usePoll(async () => {
    const bindings = (await api.queueBindings(vhost, name)).filter((b) => b.source !== "");
    const sources = [...new Set(bindings.map((b) => b.source))];
    const types = await Promise.all(
      sources.map((s) => api.exchange(vhost, s).then((e) => [s, e.type] as const, () => [s, ""] as const)),
    );
    const delayed = new Set(types.filter(([, t]) => t === "x-delayed-message").map(([s]) => s));
    return bindings.filter((b) => delayed.has(b.source)).map((b) => ({ exchange: b.source, key: b.routing_key }));
  }, [vhost, name]);
  const routes = delayedRoutes.data ?? [];
  const [choice, setChoice] = useState({ via: "" });
  const route = routes.find((r) => `${r.exchange}\u0000${r.key}` === choice.via);
  return (
    <Section title="Publish message">
      {routes.length > 0 && (
        <form class="form" id="publish-via" onSubmit={(e) => e.preventDefault()}>
          <Choice
            label="Publish through"
            form={choice}
            set={setChoice}
            name="via"
            options={[
              ["", "the default exchange (now)"],
              ...routes.map(
                (r): [string, string] => [`${r.exchange}\u0000${r.key}`, `${r.exchange} (delayed message, key ${r.key})`],
              ),
            ]}
          />
        </form>
      )}
      {route ? (
        <>
          <p class="muted">
            Published to the delayed-message exchange {route.exchange} with routing key {route.key}: the delay holds
            it there, then it is routed here.
          </p>
          <PublishForm
            key={choice.via}
            vhost={vhost}
            exchange={route.exchange}
            routingKey={route.key}
            delayed
            onDone={onDone}
          />
        </>
      ) : (
        <>
          <p class="muted">
            Published to the default exchange with routing key {name}, ready at once
            {routes.length === 0 ? " (bind an x-delayed-message exchange to this queue to publish with a delay)" : ""}.
          </p>
          <PublishForm key="default" vhost={vhost} exchange="" routingKey={name} onDone={onDone} />
        </>
      )}
    </Section>
  );
}

function Danger({ vhost, name, reload }: { vhost: string; name: string; reload: () => void }) {
  const mayPurge = may("read", vhost, name);
  const mayDelete = may("configure", vhost, name);
  return (
    <Section title="Purge / delete">
      <button
        id="purge-queue"
        disabled={!mayPurge}
        title={mayPurge ? undefined : refusedTitle(`purge ${name} (needs read permission)`)}
        onClick={() => act(() => api.purgeQueue(vhost, name), `Queue ${name} purged`).then(reload)}
      >
        Purge messages
      </button>{" "}
      <button
        id="delete-queue"
        class="danger"
        disabled={!mayDelete}
        title={mayDelete ? undefined : refusedTitle(`delete ${name} (needs configure permission)`)}
        onClick={async () => {
          if (await act(() => api.deleteQueue(vhost, name), `Queue ${name} deleted`)) go("queues");
        }}
      >
        Delete queue
      </button>
    </Section>
  );
}
