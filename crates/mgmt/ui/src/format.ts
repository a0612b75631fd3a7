// Formatting numbers, sizes, durations and times for display.

export function num(n: number | undefined | null): string {
  if (n === undefined || n === null) return "–";
  return n.toLocaleString("en-US");
}

export function rate(r: number | undefined): string {
  if (r === undefined) return "–";
  return `${r.toFixed(r >= 10 || r === 0 ? 0 : 1)}/s`;
}

export function bytes(n: number | undefined): string {
  if (n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}

/** `1h 2m`, `3m 4s`, `5.2s`, `120ms`. */
export function duration(ms: number): string {
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${Math.floor(s % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** The browser's local time with its zone: `2026-12-01 15:09:37 UTC`, `… 16:09:37 UTC+01:00`. */
export function clock(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(
    d.getMinutes(),
  )}:${pad(d.getSeconds())} ${zone(d)}`;
}

/** `UTC`, or the offset from it: `UTC+05:30`, `UTC-08:00`. */
export function zone(d: Date): string {
  const offset = -d.getTimezoneOffset();
  if (offset === 0) return "UTC";
  const abs = Math.abs(offset);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `UTC${offset > 0 ? "+" : "-"}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
}

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/** Round steps for a time axis. */
const STEPS = [
  1, 2, 5, 10, 15, 30, 1 * MINUTE / SECOND, 2 * MINUTE / SECOND, 5 * MINUTE / SECOND, 10 * MINUTE / SECOND,
  15 * MINUTE / SECOND, 30 * MINUTE / SECOND, HOUR / SECOND, 2 * HOUR / SECOND, 3 * HOUR / SECOND,
  6 * HOUR / SECOND, 12 * HOUR / SECOND, DAY / SECOND, 2 * DAY / SECOND, 7 * DAY / SECOND,
].map((s) => s * SECOND);

/** The smallest round step (1 s, 2 s, 5 s, … 1 h, … 1 d) of at least `ms`. */
export function tickStep(ms: number): number {
  return STEPS.find((s) => s >= ms) ?? Math.ceil(ms / (7 * DAY)) * 7 * DAY;
}

/** A round offset as `30s`, `5m`, `1h 30m`, `2d`: no zero parts. */
export function tickLabel(ms: number): string {
  const parts: string[] = [];
  let rest = Math.round(ms / SECOND) * SECOND;
  for (const [unit, name] of [[DAY, "d"], [HOUR, "h"], [MINUTE, "m"], [SECOND, "s"]] as const) {
    if (rest >= unit) {
      parts.push(`${Math.floor(rest / unit)}${name}`);
      rest %= unit;
    }
  }
  return parts.join(" ") || "0s";
}

export function json(value: unknown): string {
  return JSON.stringify(value);
}

/** Decodes a base64 payload as UTF-8 text when it is that, else says how many bytes. */
export function payloadText(b64: string): string {
  const binary = atob(b64);
  const data = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(data);
  } catch {
    return `(${data.length} bytes of binary data)`;
  }
}

export function tags(t: string[] | string): string {
  return Array.isArray(t) ? t.join(", ") : t;
}
