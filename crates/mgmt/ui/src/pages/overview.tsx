// #/ — totals, live message-rate charts, node alarms, listeners, definitions export/import.
import { useState } from "preact/hooks";
import { api } from "../api";
import { RateChart, ratesFromSamples, type Series } from "../chart";
import { act, ErrorBox, Section, usePoll } from "../components";
import { bytes, duration, num, rate } from "../format";
import type { Overview } from "../types";

const RATE_SERIES: Series[] = [
  { key: "publish", label: "Publish", color: "#2f6fb3" },
  { key: "deliver_get", label: "Deliver / get", color: "#2c9a4b" },
  { key: "ack", label: "Ack", color: "#8a5cc2" },
  { key: "redeliver", label: "Redeliver", color: "#d08a1c" },
  { key: "expired", label: "Expire", color: "#b8483e" },
  { key: "dead_lettered", label: "Dead-letter", color: "#555555" },
];

export function OverviewPage({ admin }: { admin: boolean }) {
  // The broker's last ten minutes of samples, at every refresh (as RabbitMQ's UI asks for them).
  const overview = usePoll(() => api.overviewWithSamples(), []);
  const nodes = usePoll(() => api.nodes(), []);
  const o = overview.data;
  const points = o ? ratesFromSamples(o.message_stats as Record<string, unknown>, RATE_SERIES.map((s) => s.key)) : [];
  return (
    <div>
      <h1>Overview</h1>
      <ErrorBox error={overview.error} />
      {o && <Totals o={o} />}
      <Section title="Message rates">
        {/* One small chart per rate, as RabbitMQ's overview: lines drawn over each other hide all but one. */}
        <div class="charts">
          {RATE_SERIES.map((s) => (
            <RateChart key={s.key} title={`${s.label} /s`} points={points} series={[s]} small />
          ))}
        </div>
        {o && points.length === 0 && <p class="muted">The charts fill in as the broker samples its rates (every 5 s).</p>}
      </Section>
      <Section title="Node">
        <ErrorBox error={nodes.error} />
        {nodes.data?.map((n) => (
          <table class="kv node" key={n.name}>
            <tbody>
              <tr>
                <th>Name</th>
                <td>{n.name}</td>
              </tr>
              <tr>
                <th>Uptime</th>
                <td>{duration(n.uptime)}</td>
              </tr>
              <tr>
                <th>Memory</th>
                <td class={n.mem_alarm ? "alarm" : "ok"}>
                  {bytes(n.mem_used)} used of {bytes(n.mem_limit)} {n.mem_alarm ? "— memory alarm" : ""}
                </td>
              </tr>
              <tr>
                <th>Disk free</th>
                <td class={n.disk_free_alarm ? "alarm" : "ok"}>
                  {bytes(n.disk_free)} (limit {bytes(n.disk_free_limit)}) {n.disk_free_alarm ? "— disk alarm" : ""}
                </td>
              </tr>
              <tr>
                <th>File descriptors</th>
                <td>
                  {num(n.fd_used)} / {num(n.fd_total)}
                </td>
              </tr>
            </tbody>
          </table>
        ))}
      </Section>
      {o && (
        <Section title="Listeners">
          <table class="list">
            <thead>
              <tr>
                <th>Protocol</th>
                <th>Bound to</th>
                <th>Port</th>
              </tr>
            </thead>
            <tbody>
              {o.listeners.map((l) => (
                <tr key={l.protocol}>
                  <td>{l.protocol}</td>
                  <td>{l.ip_address}</td>
                  <td>{l.port}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Section>
      )}
      <Definitions admin={admin} />
    </div>
  );
}

function Totals({ o }: { o: Overview }) {
  const q = o.queue_totals;
  const t = o.object_totals;
  const s = o.message_stats;
  const cell = (label: string, value: string, cls = "", sub = "") => (
    <div class={`total ${cls}`} data-count={cls || undefined}>
      <span class="value">{value}</span>
      <span class="label">{label}</span>
      {sub && <span class="sub">{sub}</span>}
    </div>
  );
  return (
    <div>
      <p class="muted">
        {o.product_name} {o.product_version} on {o.node} (RabbitMQ {o.rabbitmq_version} API)
      </p>
      <div class="totals">
        {cell("Ready", num(q.messages_ready), "ready")}
        {cell("Unacked", num(q.messages_unacknowledged), "unacked")}
        {cell("Delayed", num(q.messages_delayed ?? 0), "delayed")}
        {cell("Total", num(q.messages), "total", "ready + unacked (not delayed)")}
        {cell("Publish", rate(s.publish_details?.rate))}
        {cell("Deliver / get", rate(s.deliver_get_details?.rate))}
      </div>
      <div class="totals objects">
        {cell("Connections", num(t.connections))}
        {cell("Channels", num(t.channels))}
        {cell("Exchanges", num(t.exchanges))}
        {cell("Queues", num(t.queues))}
        {cell("Consumers", num(t.consumers))}
      </div>
    </div>
  );
}

function Definitions({ admin }: { admin: boolean }) {
  const [file, setFile] = useState<File | null>(null);
  const download = () =>
    act(async () => {
      const defs = await api.exportDefinitions();
      const blob = new Blob([JSON.stringify(defs, null, 2)], { type: "application/json" });
      const a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = `hourglass-definitions-${new Date().toISOString().slice(0, 10)}.json`;
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
    }, "Definitions exported");
  const upload = () =>
    act(async () => {
      if (!file) throw new Error("choose a definitions file first");
      const text = await file.text();
      await api.importDefinitions(JSON.parse(text));
    }, "Definitions imported");
  return (
    <Section title="Definitions (export / import)">
      {!admin && <p class="muted">Export and import need the administrator tag.</p>}
      <button id="export-definitions" disabled={!admin} onClick={download}>
        Download broker definitions
      </button>
      <div class="row">
        <input
          type="file"
          accept="application/json,.json"
          id="definitions-file"
          onChange={(e) => setFile((e.target as HTMLInputElement).files?.[0] ?? null)}
        />
        <button id="import-definitions" disabled={!admin} onClick={upload}>
          Upload broker definitions
        </button>
      </div>
    </Section>
  );
}
