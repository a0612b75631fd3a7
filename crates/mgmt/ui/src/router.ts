// Hash routes as RabbitMQ's UI has them (#/queues/{vhost}/{name}), so bookmarks carry over.
import { useEffect, useState } from "preact/hooks";

export interface Route {
  page: string;
  args: string[];
}

export function parseHash(hash: string): Route {
  const path = hash.replace(/^#\/?/, "");
  const parts = path === "" ? [] : path.split("/").map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  return { page: parts[0] ?? "", args: parts.slice(1) };
}

export function href(page: string, ...args: string[]): string {
  return `#/${[page, ...args.map(encodeURIComponent)].join("/")}`;
}

export function go(page: string, ...args: string[]): void {
  location.hash = href(page, ...args);
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const changed = () => setRoute(parseHash(location.hash));
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return route;
}
