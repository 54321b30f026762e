// The admin API's JSON shapes (docs/admin-api.md), as the console reads them.

export interface Level {
  name: string
  number: number
}

export interface Emergency {
  active: boolean
  source: string // "operator" | "auto" while active, else ""
  reason: string
  until: string | null
}

/** The learned capacity of an adaptive cluster (GET /rate_limit/ adaptive). */
export interface AdaptiveView {
  learned: number
  paused: boolean
  min: number
  max: number
  latency_target: string
  signals: { answers: number; throttles: number; slow: number; p90: string; demand: number }
  changes: { at: string; from: number; to: number; cause: string }[]
}

export interface ClusterView {
  cluster: string
  instance: string
  store: string
  capacity: number
  capacity_source?: string
  adaptive?: AdaptiveView | null
  unknown_app: string
  degradation_level: Level
  usage: number
  factors: number[]
  emergency: Emergency
  live_instances: number
  local_hit_ratio: number
  leases: number
  lease_tokens: number
  store_latency_seconds: number
  /** This API refuses changes (a console served on a site without allow_changes). */
  read_only?: boolean
}

export interface Policy {
  guaranteed: number
  burst: number
  priority: number
  max_borrow: number
  max_connections: number
  warmup: string
  /** false: every request of the app is refused (403 app_disabled). Not a form field. */
  enabled?: boolean
}

export type PolicyField = keyof Policy

export interface AppView {
  id: string
  policy: Policy | null
  source: 'caddyfile' | 'override' | 'api' | 'isolated'
  /** Decisions and cost over the last `live_window_seconds` on this instance. */
  live: LiveFigures
  override: Partial<Record<PolicyField, unknown>> | null
  local_tokens: number
  local_debt: number
  requests: { allowed: number; rejected: number; reasons: Record<string, number> }
  cost: number
  local_hits: number
  leases: number
  lease_tokens: number
  borrowed: number
  debt: number
  in_flight: number
  peak: number
  connections_rejected: number
  leaked: number
}

export interface LiveFigures {
  allowed: number
  rejected: number
  cost: number
}

/** The orders of GET /rate_limit/apps (a "-" prefix: descending). */
export type AppSortKey = 'id' | 'admitted' | 'rejected' | 'cost' | 'in_flight'

/** One page of GET /rate_limit/apps. */
export interface AppsView {
  cluster: string
  apps: AppView[]
  total: number
  next_cursor: string | null
  sort: string
  live_window_seconds: number
}

export interface RemovedView {
  id: string
  removed: true
}

export interface ClusterPolicy {
  capacity: number
  reserved_ratio: number
  emergency_threshold: number
  emergency_ratios: number[]
}

export type ClusterPolicyField = keyof ClusterPolicy

export interface ClusterPolicyView {
  cluster: string
  policy: ClusterPolicy
  source: 'caddyfile' | 'override'
  override: Partial<Record<ClusterPolicyField, unknown>> | null
}

export interface ConnectionView {
  app?: string
  current: number
  peak: number
  limit: number
  remote: number
  rejected: number
  leaked: number
}

export interface ConnectionsView {
  cluster: string
  total: ConnectionView
  /** One page: the apps with the most in flight first. */
  apps: ConnectionView[]
  /** Every app the page was cut from. */
  app_count: number
  next_cursor: string | null
  sort: string
}

/** One second of this instance's figures and L1's. */
export interface Sample {
  t: number
  allowed: number
  rejected: number
  reasons: Record<string, number>
  cost: number
  usage: number
  capacity: number
  level: number
  emergency: boolean
  live_instances: number
  in_flight: number
  connection_limit: number
  local_hit_ratio: number
}

/** One second of one app's figures. */
export interface AppSample {
  t: number
  allowed: number
  rejected: number
  reasons: Record<string, number>
  cost: number
  local_tokens: number
  in_flight: number
  limit: number
  borrowed: number
  debt: number
  guaranteed: number
  burst: number
}

export interface HistoryView {
  cluster: string
  interval_seconds: number
  samples: Sample[]
  apps: Record<string, AppSample[]>
}

export interface StreamEvent {
  cluster: string
  sample: Sample
  apps: Record<string, AppSample>
}

/** One point of GET /rate_limit/history?range=…: rates per second over the step. */
export interface RangePoint {
  t: number
  admitted: number
  rejected: number
  reasons?: Record<string, number>
  cost: number
  usage: number
  capacity: number
  in_flight: number
  instances: number
}

export interface RangeView {
  cluster: string
  app?: string
  range: string
  step_seconds: number
  available: boolean
  reason?: string
  source?: string
  points: RangePoint[]
}

export interface AuditEntry {
  time: string
  instance: string
  remote_addr: string
  client_subject?: string
  route: string
  change: string
  details?: Record<string, unknown>
  before: unknown
  after: unknown
}

export interface AuditView {
  cluster: string
  entries: AuditEntry[]
}
