// The login form: checks the credentials with /api/whoami and keeps them for this tab only
// (sessionStorage), as RabbitMQ's UI does; no browser Basic-auth prompt.
import { useState } from "preact/hooks";
import { api, basic } from "../api";
import type { Whoami } from "../types";

export function LoginPage({ onLogin }: { onLogin: (auth: string, who: Whoami) => void }) {
  const [user, setUser] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<string | null>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    const auth = basic(user, password);
    try {
      onLogin(auth, await api.whoami(auth));
    } catch (err) {
      setError(String((err as Error).message).includes("401") ? "Login failed" : String((err as Error).message));
    }
  };
  return (
    <div class="login">
      <h1>Hourglass</h1>
      <form id="login" onSubmit={submit}>
        <label class="field">
          <span>Username</span>
          <input name="username" autocomplete="username" value={user} onInput={(e) => setUser((e.target as HTMLInputElement).value)} />
        </label>
        <label class="field">
          <span>Password</span>
          <input
            name="password"
            type="password"
            autocomplete="current-password"
            value={password}
            onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
          />
        </label>
        <button type="submit">Login</button>
        {error && <p class="error">{error}</p>}
      </form>
    </div>
  );
}
