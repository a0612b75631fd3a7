// Shared pieces: polling, the status line for actions, server-side listings, small tables.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";
import type { ListQuery } from "./api";
import type { Args, Page } from "./types";
import { num } from "./format";

/** RabbitMQ's UI refreshes every 5 s; so does the API's rate sampling. */
export const REFRESH_MS = 5000;

export interface Polled<T> {
  data: T | null;
  error: string | null;
  reload: () => void;
}

/** Loads now, then every `intervalMs`, never two loads at once; `deps` change → load again. */
export function usePoll<T>(load: () => Promise<T>, deps: unknown[], intervalMs = REFRESH_MS): Polled<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    // Per run of the effect: a load for new `deps` starts at once even while an older one is
    // still out (whose answer is then dropped: `live` is false).
    let live = true;
    let busy = false;
    const run = async () => {
      if (busy) return;
      busy = true;
      try {
        const value = await load();
        if (live) {
          setData(value);
          setError(null);
        }
      } catch (e) {
        if (live) setError(String((e as Error).message ?? e));
      } finally {
        busy = false;
      }
    };
    void run();
    const timer = setInterval(run, intervalMs);
    return () => {
      live = false;
      clearInterval(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick]);
  return { data, error, reload };
}

// The status line: the outcome of the last action (the API's error text when refused).
type StatusListener = (s: { text: string; error: boolean } | null) => void;
let statusListener: StatusListener = () => {};
export function setStatusListener(l: StatusListener): void {
  statusListener = l;
}

/**
 * Runs an action; reports `done` (or what `done` makes of the action's answer) or the API's error
 * on the status line. True when it worked.
 */
export async function act<T>(work: () => Promise<T>, done: string | ((result: T) => string)): Promise<boolean> {
  try {
    const result = await work();
    statusListener({ text: typeof done === "string" ? done : done(result), error: false });
    return true;
  } catch (e) {
    statusListener({ text: String((e as Error).message ?? e), error: true });
    return false;
  }
}

/**
 * A page's load error, with `missing` in place of the API's `404 Object Not Found: Not Found`
 * when the object does not exist.
 */
export function notFound(error: string | null, missing: string): string | null {
  return error !== null && error.startsWith("404") ? missing : error;
}

export function ErrorBox({ error }: { error: string | null }) {
  return error ? <p class="error">{error}</p> : null;
}

export function Section({ title, children, id }: { title: string; children: ComponentChildren; id?: string }) {
  return (
    <section class="section" id={id}>
      <h2>{title}</h2>
      {children}
    </section>
  );
}

export function ArgsTable({ args }: { args: Args }) {
  const keys = Object.keys(args ?? {});
  if (keys.length === 0) return <span class="muted">none</span>;
  return (
    <table class="kv">
      <tbody>
        {keys.map((k) => (
          <tr key={k}>
            <th>{k}</th>
            <td>{typeof args[k] === "string" ? (args[k] as string) : JSON.stringify(args[k])}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export interface Column<T> {
  label: string;
  /** The API's sort key; without one the column does not sort. */
  sort?: string;
  render: (row: T) => ComponentChildren;
  class?: string;
}

const PAGE_SIZES = [20, 100, 500];

/**
 * A listing paged, sorted and filtered by the server (`page`, `page_size`, `sort`,
 * `sort_reverse`, `name`), so thousands of rows never reach the page at once.
 */
export function ServerTable<T>(props: {
  load: (q: ListQuery) => Promise<Page<T>>;
  columns: Column<T>[];
  rowKey: (row: T) => string;
  what: string;
  defaultSort?: string;
  reloadKey?: number;
}) {
  const [query, setQuery] = useState<ListQuery>({ page: 1, page_size: 100, sort: props.defaultSort, name: "" });
  const [filter, setFilter] = useState("");
  useEffect(() => {
    const t = setTimeout(() => setQuery((q) => (q.name === filter ? q : { ...q, name: filter, page: 1 })), 300);
    return () => clearTimeout(t);
  }, [filter]);
  const page = usePoll(() => props.load(query), [query, props.reloadKey]);
  const data = page.data;
  const sortBy = (key: string) =>
    setQuery((q) => ({ ...q, sort: key, sort_reverse: q.sort === key ? !q.sort_reverse : false, page: 1 }));
  return (
    <div class="listing">
      <div class="controls">
        <label>
          Filter:{" "}
          <input
            class="filter"
            name="filter"
            value={filter}
            placeholder="name contains…"
            onInput={(e) => setFilter((e.target as HTMLInputElement).value)}
          />
        </label>
        <label>
          Page size:{" "}
          <select
            value={query.page_size}
            onChange={(e) => setQuery({ ...query, page_size: Number((e.target as HTMLSelectElement).value), page: 1 })}
          >
            {PAGE_SIZES.map((s) => (
              <option value={s}>{s}</option>
            ))}
          </select>
        </label>
        {data && (
          <span class="pager">
            <button disabled={query.page <= 1} onClick={() => setQuery({ ...query, page: query.page - 1 })}>
              ‹
            </button>{" "}
            Page {data.page} of {data.page_count}{" "}
            <button
              disabled={query.page >= data.page_count}
              onClick={() => setQuery({ ...query, page: query.page + 1 })}
            >
              ›
            </button>{" "}
            <span class="muted">
              {num(data.filtered_count)} {props.what} shown of {num(data.total_count)}
            </span>
          </span>
        )}
      </div>
      <ErrorBox error={page.error} />
      <table class="list">
        <thead>
          <tr>
            {props.columns.map((c) => (
              <th
                class={`${c.class ?? ""} ${c.sort ? "sortable" : ""} ${query.sort === c.sort && c.sort ? "sorted" : ""}`}
                onClick={c.sort ? () => sortBy(c.sort as string) : undefined}
              >
                {c.label}
                {c.sort && query.sort === c.sort ? (query.sort_reverse ? " ▼" : " ▲") : ""}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {data?.items.map((row) => (
            <tr key={props.rowKey(row)}>
              {props.columns.map((c) => (
                <td class={c.class}>{c.render(row)}</td>
              ))}
            </tr>
          ))}
          {data && data.items.length === 0 && (
            <tr>
              <td colSpan={props.columns.length} class="muted">
                no {props.what}
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}

/** A controlled text input bound to one key of a form state object. */
export function Field<F extends Record<string, string>>(props: {
  label: string;
  form: F;
  set: (f: F) => void;
  name: keyof F & string;
  type?: string;
  textarea?: boolean;
  placeholder?: string;
}) {
  const onInput = (e: Event) =>
    props.set({ ...props.form, [props.name]: (e.target as HTMLInputElement).value });
  return (
    <label class="field">
      <span>{props.label}</span>
      {props.textarea ? (
        <textarea name={props.name} value={props.form[props.name]} onInput={onInput} placeholder={props.placeholder} />
      ) : (
        <input
          name={props.name}
          type={props.type ?? "text"}
          value={props.form[props.name]}
          onInput={onInput}
          placeholder={props.placeholder}
        />
      )}
    </label>
  );
}

/** A select bound to one key of a form state object. */
export function Choice<F extends Record<string, string>>(props: {
  label: string;
  form: F;
  set: (f: F) => void;
  name: keyof F & string;
  options: [string, string][];
}) {
  return (
    <label class="field">
      <span>{props.label}</span>
      <select
        name={props.name}
        value={props.form[props.name]}
        onChange={(e) => props.set({ ...props.form, [props.name]: (e.target as HTMLSelectElement).value })}
      >
        {props.options.map(([value, text]) => (
          <option value={value}>{text}</option>
        ))}
      </select>
    </label>
  );
}

/** Parses a JSON object typed into a form; throws a readable error. */
export function parseObject(text: string, what: string): Args {
  if (text.trim() === "") return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Error(`${what}: not valid JSON (${(e as Error).message})`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error(`${what}: must be a JSON object`);
  return value as Args;
}
