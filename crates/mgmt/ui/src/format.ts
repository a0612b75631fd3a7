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

export function clock(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(
    d.getMinutes(),
  )}:${pad(d.getSeconds())}`;
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
