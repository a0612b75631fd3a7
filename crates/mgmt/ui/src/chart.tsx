// A plain SVG line chart of rates over time (no chart library: a few polylines and labels).
import { rate } from "./format";
import type { Rate } from "./types";

export interface Series {
  key: string;
  label: string;
  color: string;
}

export interface Point {
  /** Wall-clock ms. */
  t: number;
  values: Record<string, number>;
}

const PAD_L = 44;
const PAD_B = 18;

/** `small`: one of a grid of small charts, one rate each (as RabbitMQ's overview draws them). */
export function RateChart(props: { points: Point[]; series: Series[]; title: string; small?: boolean }) {
  const { points, series, title } = props;
  const W = props.small ? 300 : 560;
  const H = props.small ? 110 : 150;
  const last = points[points.length - 1];
  const t0 = points.length ? points[0].t : 0;
  const t1 = last ? last.t : 1;
  const span = Math.max(t1 - t0, 1);
  const max = Math.max(1, ...points.flatMap((p) => series.map((s) => p.values[s.key] ?? 0)));
  const x = (t: number) => PAD_L + ((t - t0) / span) * (W - PAD_L - 4);
  const y = (v: number) => 4 + (1 - v / max) * (H - PAD_B - 8);
  return (
    <figure class={props.small ? "chart small" : "chart"} data-series={series.map((s) => s.key).join(" ")}>
      <figcaption>{title}</figcaption>
      <svg viewBox={`0 0 ${W} ${H}`} width={W} height={H} role="img" aria-label={title}>
        <line x1={PAD_L} y1={y(0)} x2={W - 4} y2={y(0)} class="axis" />
        <line x1={PAD_L} y1={y(max)} x2={W - 4} y2={y(max)} class="grid" />
        <text x={PAD_L - 4} y={y(max) + 4} class="tick" text-anchor="end">
          {rate(max)}
        </text>
        <text x={PAD_L - 4} y={y(0) + 4} class="tick" text-anchor="end">
          0
        </text>
        <text x={W - 4} y={H - 4} class="tick" text-anchor="end">
          now
        </text>
        {points.length > 1 && (
          <text x={PAD_L} y={H - 4} class="tick">
            −{Math.round(span / 1000)}s
          </text>
        )}
        {points.length > 1 &&
          series.map((s) => (
            <polyline
              key={s.key}
              fill="none"
              stroke={s.color}
              stroke-width="2"
              points={points.map((p) => `${x(p.t).toFixed(1)},${y(p.values[s.key] ?? 0).toFixed(1)}`).join(" ")}
            />
          ))}
      </svg>
      <ul class="legend">
        {series.map((s) => (
          <li key={s.key}>
            <span class="swatch" style={{ background: s.color }} />
            {s.label}: <b>{rate(last?.values[s.key])}</b>
          </li>
        ))}
      </ul>
    </figure>
  );
}

/**
 * Rates from the broker's own samples of its counters (`samples` of each `<key>_details`, newest
 * first, as `?msg_rates_age=&msg_rates_incr=` lists them): (newer − older) / seconds between,
 * never negative (a deleted queue takes its counts with it). The broker keeps the history, so a
 * page loaded now shows the last ten minutes at once.
 */
export function ratesFromSamples(stats: Record<string, unknown>, keys: string[]): Point[] {
  const byTime = new Map<number, Record<string, number>>();
  for (const key of keys) {
    const samples = (stats[`${key}_details`] as Rate | undefined)?.samples ?? [];
    for (const { sample, timestamp } of samples) {
      const counters = byTime.get(timestamp) ?? {};
      counters[key] = sample;
      byTime.set(timestamp, counters);
    }
  }
  const times = [...byTime.keys()].sort((a, b) => a - b);
  const points: Point[] = [];
  for (let i = 1; i < times.length; i++) {
    const [before, now] = [byTime.get(times[i - 1])!, byTime.get(times[i])!];
    const seconds = (times[i] - times[i - 1]) / 1000;
    const values: Record<string, number> = {};
    for (const key of keys) {
      if (key in now && key in before) values[key] = Math.max(0, (now[key] - before[key]) / seconds);
    }
    points.push({ t: times[i], values });
  }
  return points;
}
