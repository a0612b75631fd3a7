// The timeline of what waits in a queue: delayed messages at their due times, deliveries in
// flight at the time they come back, and the span in which ready messages reach their TTL.
import { duration, tickStep, tickLabel } from "./format";

export interface TimelineData {
  now: number;
  delayed: number[];
  inFlight: number[];
  /** When the ready messages with a TTL expire, first and last (if none leaves first). */
  expiries: { first: number; last: number; count: number } | null;
  /** More than were listed? */
  delayedTotal: number;
  inFlightTotal: number;
}

const W = 760;
const LANE = 34;
const PAD_L = 110;

export function Timeline({ data }: { data: TimelineData }) {
  const ends = [...data.delayed, ...data.inFlight, data.expiries?.last ?? 0];
  const furthest = Math.max(10_000, ...ends.map((t) => t - data.now)) * 1.05;
  // Ticks at round steps (1, 2, 5, 10, 15, 30 of a unit), the axis ending on the last one.
  const step = tickStep(furthest / 4);
  const horizon = Math.ceil(furthest / step) * step;
  const x = (t: number) => PAD_L + Math.max(0, Math.min(1, (t - data.now) / horizon)) * (W - PAD_L - 10);
  const lanes: { label: string; cls: string; times: number[]; total: number }[] = [
    { label: "delayed", cls: "delayed", times: data.delayed, total: data.delayedTotal },
    { label: "in flight", cls: "inflight", times: data.inFlight, total: data.inFlightTotal },
  ];
  const H = LANE * 3 + 24;
  const ticks = Array.from({ length: Math.round(horizon / step) + 1 }, (_, i) => i * step);
  return (
    <svg class="timeline" viewBox={`0 0 ${W} ${H}`} width={W} height={H} role="img" aria-label="timeline">
      {ticks.map((ms) => (
        <g key={ms}>
          <line x1={x(data.now + ms)} y1={4} x2={x(data.now + ms)} y2={H - 18} class="grid" />
          <text x={x(data.now + ms)} y={H - 4} class="tick" text-anchor={ms === 0 ? "start" : ms === horizon ? "end" : "middle"}>
            {ms === 0 ? "now" : `+${tickLabel(ms)}`}
          </text>
        </g>
      ))}
      {lanes.map((lane, i) => (
        <g key={lane.label}>
          <text x={4} y={LANE * i + 24} class="lane">
            {lane.label} ({lane.total})
          </text>
          {lane.times.map((t, j) => (
            <circle key={j} cx={x(t)} cy={LANE * i + 20} r={5} class={lane.cls}>
              <title>{`${lane.label}: in ${duration(t - data.now)}`}</title>
            </circle>
          ))}
        </g>
      ))}
      <text x={4} y={LANE * 2 + 24} class="lane">
        expiring ({data.expiries?.count ?? 0})
      </text>
      {data.expiries ? (
        <rect
          x={x(data.expiries.first)}
          y={LANE * 2 + 12}
          width={Math.max(3, x(data.expiries.last) - x(data.expiries.first))}
          height={14}
          class="ttl"
        >
          <title>{`${data.expiries.count} ready messages expire between ${duration(
            data.expiries.first - data.now,
          )} and ${duration(data.expiries.last - data.now)} from now`}</title>
        </rect>
      ) : (
        <text x={PAD_L} y={LANE * 2 + 24} class="tick">
          no ready message has a TTL
        </text>
      )}
    </svg>
  );
}
