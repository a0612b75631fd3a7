// The app shell: login gate, navigation tabs, hash routing to one module per page.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { setUser } from "./access";
import { api, credentials, saveCredentials, setLoggedOutHandler } from "./api";
import { setStatusListener } from "./components";
import { tags } from "./format";
import { useRoute } from "./router";
import type { Whoami } from "./types";
import { ChannelsPage, ConnectionsPage } from "./pages/connections";
import { ExchangePage } from "./pages/exchange";
import { ExchangesPage } from "./pages/exchanges";
import { LoginPage } from "./pages/login";
import { OverviewPage } from "./pages/overview";
import { PoliciesPage } from "./pages/policies";
import { QueuePage } from "./pages/queue";
import { QueuesPage } from "./pages/queues";
import { UserPage } from "./pages/user";
import { UsersPage } from "./pages/users";
import { VhostsPage } from "./pages/vhosts";

const TABS: [string, string][] = [
  ["", "Overview"],
  ["connections", "Connections"],
  ["channels", "Channels"],
  ["exchanges", "Exchanges"],
  ["queues", "Queues"],
  ["users", "Users"],
  ["vhosts", "Virtual hosts"],
  ["policies", "Policies"],
];

function App() {
  const [who, setWho] = useState<Whoami | null>(null);
  const [checking, setChecking] = useState(credentials() !== null);
  const [status, setStatus] = useState<{ text: string; error: boolean } | null>(null);
  const route = useRoute();
  const logout = () => {
    saveCredentials(null);
    setUser(null);
    setWho(null);
  };
  useEffect(() => {
    setLoggedOutHandler(logout);
    setStatusListener(setStatus);
    const saved = credentials();
    if (saved)
      api
        .whoami(saved)
        .then(setWho)
        .catch(() => saveCredentials(null))
        .finally(() => setChecking(false));
  }, []);
  useEffect(() => setStatus(null), [route.page, route.args.join("/")]);
  if (checking) return <p class="muted">Loading…</p>;
  if (!who)
    return (
      <LoginPage
        onLogin={(auth, w) => {
          saveCredentials(auth);
          setWho(w);
        }}
      />
    );
  setUser(who);
  const admin = (Array.isArray(who.tags) ? who.tags : who.tags.split(",")).includes("administrator");
  return (
    <div class="app">
      <header>
        <span class="brand">
          <Logo /> Hourglass
        </span>
        <nav>
          {TABS.map(([page, label]) => (
            <a key={page} href={`#/${page}`} class={route.page === page ? "active" : ""}>
              {label}
            </a>
          ))}
        </nav>
        <span class="who">
          User <b id="whoami">{who.name}</b> <span class="muted">({tags(who.tags)})</span>{" "}
          <button id="logout" onClick={logout}>
            Log out
          </button>
        </span>
      </header>
      {status && (
        <p class={`status ${status.error ? "error" : "ok"}`} id="status" role="status">
          {status.text}
          <button class="close" onClick={() => setStatus(null)}>
            ×
          </button>
        </p>
      )}
      <main>
        <Page page={route.page} args={route.args} admin={admin} />
      </main>
    </div>
  );
}

/** An hourglass drawn in SVG (no icon font: nothing to fetch, no missing glyph). */
function Logo() {
  return (
    <svg class="logo" viewBox="0 0 16 20" width="14" height="18" aria-hidden="true">
      <path d="M2 1h12M2 19h12M3 1c0 6 5 6 5 9s-5 3-5 9M13 1c0 6-5 6-5 9s5 3 5 9" />
      <path class="sand" d="M5 17c1-2 2-3 3-3s2 1 3 3z" />
    </svg>
  );
}

function Page({ page, args, admin }: { page: string; args: string[]; admin: boolean }) {
  switch (page) {
    case "":
      return <OverviewPage admin={admin} />;
    case "connections":
      return <ConnectionsPage />;
    case "channels":
      return <ChannelsPage />;
    case "exchanges":
      return args.length >= 2 ? <ExchangePage vhost={args[0]} name={args[1]} /> : <ExchangesPage />;
    case "queues":
      return args.length >= 2 ? <QueuePage vhost={args[0]} name={args[1]} /> : <QueuesPage />;
    case "users":
      return args.length >= 1 ? <UserPage name={args[0]} /> : <UsersPage />;
    case "vhosts":
      return <VhostsPage />;
    case "policies":
      return <PoliciesPage />;
    default:
      return <p class="error">No such page: #/{page}</p>;
  }
}

const root = document.getElementById("app");
if (root) {
  root.textContent = "";
  render(<App />, root);
}
