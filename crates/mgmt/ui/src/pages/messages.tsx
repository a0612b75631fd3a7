// Getting messages from a queue (RabbitMQ's ack modes) and publishing one to an exchange.
import { useState } from "preact/hooks";
import { may, refusedTitle } from "../access";
import { api } from "../api";
import { act, Choice, Field, parseObject } from "../components";
import { payloadText } from "../format";
import type { GotMessage } from "../types";

const ACK_MODES: [string, string][] = [
  ["ack_requeue_true", "Nack message requeue true"],
  ["ack_requeue_false", "Automatic ack"],
  ["reject_requeue_true", "Reject requeue true"],
  ["reject_requeue_false", "Reject requeue false"],
];

export function GetMessages({ vhost, queue, onDone }: { vhost: string; queue: string; onDone: () => void }) {
  const [form, setForm] = useState({ ackmode: "ack_requeue_true", encoding: "auto", count: "1" });
  const [got, setGot] = useState<GotMessage[] | null>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    let result: GotMessage[] = [];
    const ok = await act(async () => {
      result = await api.getMessages(vhost, queue, {
        count: Number(form.count) || 1,
        ackmode: form.ackmode,
        encoding: form.encoding,
        truncate: 50000,
      });
    }, "Got messages");
    if (ok) setGot(result);
    onDone();
  };
  return (
    <div>
      <form class="form" id="get-messages" onSubmit={submit}>
        <Choice label="Ack mode" form={form} set={setForm} name="ackmode" options={ACK_MODES} />
        <Choice
          label="Encoding"
          form={form}
          set={setForm}
          name="encoding"
          options={[["auto", "Auto string / base64"], ["base64", "base64"]]}
        />
        <Field label="Messages" form={form} set={setForm} name="count" type="number" />
        <button
          type="submit"
          disabled={!may("read", vhost, queue)}
          title={may("read", vhost, queue) ? undefined : refusedTitle(`get from ${queue} (needs read permission)`)}
        >
          Get message(s)
        </button>
      </form>
      {got && got.length === 0 && <p class="muted got-none">Queue is empty.</p>}
      {got?.map((m, i) => (
        <table class="kv got" key={i}>
          <tbody>
            <tr>
              <th>Message {i + 1}</th>
              <td>
                {m.message_count} messages left in the queue{m.redelivered ? ", redelivered" : ""}
              </td>
            </tr>
            <tr>
              <th>Exchange</th>
              <td>{m.exchange || "(default)"}</td>
            </tr>
            <tr>
              <th>Routing key</th>
              <td>{m.routing_key}</td>
            </tr>
            <tr>
              <th>Properties</th>
              <td>{JSON.stringify(m.properties)}</td>
            </tr>
            <tr>
              <th>Payload ({m.payload_bytes} bytes, {m.payload_encoding})</th>
              <td>
                <pre class="payload">{m.payload_encoding === "base64" ? payloadText(m.payload) : m.payload}</pre>
              </td>
            </tr>
          </tbody>
        </table>
      ))}
    </div>
  );
}

/**
 * Publishes to `exchange`. `delayed`: the exchange is an `x-delayed-message` one, the only kind
 * where an `x-delay` header delays the message, so only then is there a "Delay (ms)" field.
 */
export function PublishForm(props: {
  vhost: string;
  exchange: string;
  routingKey?: string;
  delayed?: boolean;
  onDone?: () => void;
}) {
  const [form, setForm] = useState({
    routing_key: props.routingKey ?? "",
    delivery_mode: "1",
    delay: "",
    headers: "",
    properties: "",
    payload: "",
  });
  const submit = async (e: Event) => {
    e.preventDefault();
    let routed = true;
    const ok = await act(async () => {
      const properties = parseObject(form.properties, "Properties");
      const headers = parseObject(form.headers, "Headers");
      if (props.delayed && form.delay.trim() !== "") {
        const delay = Number(form.delay);
        if (!Number.isInteger(delay) || delay < 0) throw new Error("Delay must be a whole number of ms, 0 or more");
        headers["x-delay"] = delay;
      }
      const answer = await api.publish(props.vhost, props.exchange, {
        routing_key: form.routing_key,
        payload: form.payload,
        payload_encoding: "string",
        properties: {
          ...properties,
          delivery_mode: Number(form.delivery_mode),
          ...(Object.keys(headers).length ? { headers } : {}),
        },
      });
      routed = answer.routed;
    }, props.delayed && form.delay.trim() !== "" ? `Message published, delayed ${form.delay} ms` : "Message published");
    if (ok && !routed) await act(() => Promise.reject(new Error("Message published, but not routed to any queue")), "");
    props.onDone?.();
  };
  return (
    <form class="form" id="publish-message" onSubmit={submit}>
      {props.routingKey === undefined && <Field label="Routing key" form={form} set={setForm} name="routing_key" />}
      <Choice
        label="Delivery mode"
        form={form}
        set={setForm}
        name="delivery_mode"
        options={[["1", "1 - Non-persistent"], ["2", "2 - Persistent"]]}
      />
      {props.delayed && <Field label="Delay (ms)" form={form} set={setForm} name="delay" type="number" placeholder="30000" />}
      <Field label="Headers (JSON)" form={form} set={setForm} name="headers" placeholder='{"my-header": "value"}' />
      <Field
        label="Properties (JSON)"
        form={form}
        set={setForm}
        name="properties"
        placeholder='{"content_type": "text/plain", "expiration": "60000"}'
      />
      <Field label="Payload" form={form} set={setForm} name="payload" textarea />
      <button
        type="submit"
        disabled={!may("write", props.vhost, props.exchange)}
        title={may("write", props.vhost, props.exchange) ? undefined : refusedTitle("publish here (needs write permission)")}
      >
        Publish message
      </button>
    </form>
  );
}
