// The shapes of the API's answers that the UI reads (docs/http-api.md). Fields the UI does not
// read are left out; optional ones may be missing on some objects.

export interface Rate {
  rate: number;
  /** With `?msg_rates_age=&msg_rates_incr=`: the counter at each sample, newest first. */
  samples?: { sample: number; timestamp: number }[];
}

export interface MessageStats {
  publish?: number;
  publish_details?: Rate;
  publish_in?: number;
  publish_in_details?: Rate;
  publish_out?: number;
  publish_out_details?: Rate;
  deliver_get?: number;
  deliver_get_details?: Rate;
  ack?: number;
  ack_details?: Rate;
  redeliver?: number;
  redeliver_details?: Rate;
  confirm?: number;
  return_unroutable?: number;
  /** Hourglass: messages expired in the queues that exist now. */
  expired?: number;
  /** Hourglass: messages dead-lettered from the queues that exist now. */
  dead_lettered?: number;
}

export interface Listener {
  node: string;
  protocol: string;
  ip_address: string;
  port: number;
}

export interface Overview {
  product_name: string;
  product_version: string;
  rabbitmq_version: string;
  node: string;
  message_stats: MessageStats;
  queue_totals: {
    messages: number;
    messages_ready: number;
    messages_unacknowledged: number;
    messages_delayed?: number;
  };
  object_totals: { connections: number; channels: number; exchanges: number; queues: number; consumers: number };
  listeners: Listener[];
}

export interface Node {
  name: string;
  uptime: number;
  mem_used: number;
  mem_limit: number;
  mem_alarm: boolean;
  disk_free: number;
  disk_free_limit: number;
  disk_free_alarm: boolean;
  fd_used: number;
  fd_total: number;
}

export type Args = Record<string, unknown>;

export interface Queue {
  name: string;
  vhost: string;
  type: string;
  durable: boolean;
  auto_delete: boolean;
  exclusive: boolean;
  arguments: Args;
  policy: string | null;
  operator_policy: string | null;
  effective_policy_definition: Args;
  consumers: number;
  messages: number;
  messages_details?: Rate;
  messages_ready: number;
  messages_ready_details?: Rate;
  messages_unacknowledged: number;
  messages_unacknowledged_details?: Rate;
  messages_delayed: number;
  message_bytes: number;
  message_bytes_delayed: number;
  next_due_ms: number | null;
  /** Ready messages with a TTL deadline; the first and last deadlines (wall-clock ms). */
  messages_with_ttl: number;
  next_expiry_ms: number | null;
  last_expiry_ms: number | null;
  messages_expired: number;
  messages_dead_lettered: { rejected: number; expired: number; maxlen: number; delivery_limit: number };
  messages_visibility_expired: number;
  messages_redelivered: number;
  message_stats?: MessageStats;
  /** Quorum queues (RabbitMQ 4.3): ready messages per priority, and how many priorities hold some. */
  messages_by_priority?: Record<string, number>;
  messages_active_priorities?: number;
  /** What arguments and policies add up to, defaults applied; null where nothing applies. */
  effective_settings?: EffectiveSettings;
}

export interface EffectiveSettings {
  message_ttl: number | null;
  delivery_delay: number | null;
  visibility_timeout: number | null;
  consumer_timeout: number | null;
  delivery_limit: number | null;
  redelivery_delay: number | null;
  redelivery_delay_max: number | null;
  /** `multiplier` null: linear (min × returns); else min × multiplier^(returns−1). */
  delayed_retry: { type: string; min: number; max: number; multiplier: number | null } | null;
}

export interface Exchange {
  name: string;
  vhost: string;
  type: string;
  durable: boolean;
  auto_delete: boolean;
  internal: boolean;
  arguments: Args;
  policy?: string | null;
  message_stats?: MessageStats;
}

export interface Binding {
  source: string;
  vhost: string;
  destination: string;
  destination_type: "queue" | "exchange";
  routing_key: string;
  arguments: Args;
  properties_key: string;
}

export interface Connection {
  name: string;
  user: string;
  vhost: string;
  state: string;
  channels: number;
  peer_host: string;
  peer_port: number;
  protocol: string;
}

export interface Channel {
  name: string;
  number: number;
  user: string;
  vhost: string;
  confirm: boolean;
  transactional: boolean;
  prefetch_count: number;
  messages_unacknowledged: number;
  consumer_count: number;
  connection_details: { name: string };
  message_stats?: MessageStats;
}

export interface Consumer {
  consumer_tag: string;
  ack_required: boolean;
  prefetch_count: number;
  exclusive: boolean;
  queue: { name: string; vhost: string };
  channel_details: { name: string; connection_name?: string };
  arguments: Args;
  /** The consumer timeout its deliveries run under (ms); null when none applies. */
  consumer_timeout: number | null;
}

export interface User {
  name: string;
  tags: string[] | string;
}

/** An SQS access key of a user (`GET /api/users/{user}/access-keys`): never its secret. */
export interface AccessKey {
  access_key_id: string;
  user: string;
  /** The vhost the key acts in; missing from an older API, which means `/`. */
  vhost?: string;
  created_ms: number;
}

/** The answer to making a key: the only place its secret is ever shown. */
export interface NewAccessKey {
  access_key_id: string;
  secret_access_key: string;
  user: string;
  vhost?: string;
}

export interface WhoamiPermission {
  vhost: string;
  configure: string;
  write: string;
  read: string;
}

export interface Whoami {
  name: string;
  tags: string[] | string;
  /** The user's own permissions (Hourglass's addition to /api/whoami), for the UI's buttons. */
  permissions?: WhoamiPermission[];
}

export interface Vhost {
  name: string;
  description?: string;
  messages?: number;
  /** The firehose tracer is on. */
  tracing?: boolean;
}

export interface Permission {
  user: string;
  vhost: string;
  configure: string;
  write: string;
  read: string;
}

export interface Policy {
  vhost: string;
  name: string;
  pattern: string;
  "apply-to": string;
  definition: Args;
  priority: number;
}

export interface Page<T> {
  items: T[];
  filtered_count: number;
  item_count: number;
  page: number;
  page_count: number;
  page_size: number;
  total_count: number;
}

export interface DelayedMessage {
  id: number;
  due_ms: number;
  due_in_ms: number;
  exchange: string;
  routing_key: string;
  properties: Args;
  payload: string;
  payload_bytes: number;
  payload_truncated: boolean;
}

export interface InFlight {
  deliveries: {
    /** null under a consumer timeout, which no receipt handle steers. */
    receipt_handle: string | null;
    /** What brings it back: a visibility timeout, or a consumer timeout (RabbitMQ 4.3). */
    timeout: "visibility" | "consumer";
    /** The consumer timeout (ms) when that is what brings it back. */
    consumer_timeout: number | null;
    connection: string | null;
    channel: string | null;
    delivery_tag: number;
    visible_at_ms: number;
    visible_in_ms: number;
  }[];
  total: number;
}

export interface GotMessage {
  payload: string;
  payload_bytes: number;
  payload_encoding: string;
  redelivered: boolean;
  exchange: string;
  routing_key: string;
  message_count: number;
  properties: Args;
}
