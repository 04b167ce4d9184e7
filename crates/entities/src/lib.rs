//! Fleetwire's entity store: tenants, users, device profiles, devices, device credentials, dashboards and
//! alarms, kept in one embedded SQLite database (WAL mode, `synchronous = FULL`, so a REST write that
//! returned is on disk).
//!
//! - [`store`]: [`Entities`], the handle every caller shares; opening, the connection lock, change listeners.
//! - [`schema`]: the tables and the numbered migrations (`PRAGMA user_version`).
//! - [`tenant`], [`user`], [`profile`], [`device`], [`credentials`], [`dashboard`]: one entity each, with
//!   its row type, its validation (ThingsBoard's messages) and its queries.
//! - [`alarm`]: alarms (reference 4.8): the entity. `alarm_save`: the REST writes, ThingsBoard's
//!   create-or-update-active rule (one active alarm per originator and type), ack, clear, assign,
//!   delete; `alarm_row`: the SQLite row and the reads by id. [`alarm_query`]: pages with
//!   every filter of the reference, the highest severity of an originator, the alarm types.
//!   [`alarm_index`]: the active alarms in memory, loaded at open and kept in step with every write, so
//!   the alarm-rule evaluator's [`Entities::active_alarm`] never touches SQLite. [`alarm_transition`]:
//!   the evaluator's writes ([`Entities::raise_alarm`], [`Entities::clear_active_alarm`]) and what each
//!   did. Deleting a device deletes its alarms.
//! - [`device_auth`]: the in-memory credentials cache the transports authenticate against (no SQLite on the
//!   hot path) and the MQTT CONNECT decision of the ThingsBoard reference, section 1.2.
//! - [`bootstrap`]: the idempotent first-start setup (sysadmin, tenant, tenant admin, default profile, demo
//!   data).
//! - [`page`]: ThingsBoard's page query (`pageSize`, `page`, `textSearch`, `sortProperty`, `sortOrder`).
//! - [`password`]: argon2 password hashing and random secrets.
//!
//! Calls are blocking and short (one SQLite transaction under a mutex, typically well under a millisecond;
//! password hashing takes tens of milliseconds). Async callers run them on `spawn_blocking`. The device
//! authentication lookups and [`Entities::active_alarm`] never touch SQLite and may be called from async
//! code or the processor threads directly.
//!
//! Architecture invariant: this crate knows nothing of HTTP, JSON field names of the REST API, tokio or the
//! network. It stores ThingsBoard's entities; the server crate renders them.

pub mod alarm;
pub mod alarm_index;
pub mod alarm_query;
mod alarm_row;
mod alarm_save;
pub mod alarm_transition;
pub mod bootstrap;
pub mod credentials;
pub mod customer;
pub mod dashboard;
pub mod device;
pub mod device_auth;
mod error;
pub mod gateway;
pub mod page;
pub mod password;
pub mod profile;
pub mod rpc;
pub mod schema;
mod sql;
pub mod store;
pub mod tenant;
pub mod user;
pub mod user_activation;

pub use alarm::{
    Alarm, AlarmAssignee, AlarmDraft, AlarmInfo, AlarmSeverity, AlarmStatus, Originator,
    Propagation,
};
pub use alarm_index::ActiveAlarm;
pub use alarm_query::{AlarmQuery, AlarmSearchStatus, AlarmStatusFilter};
pub use alarm_transition::{AlarmOutcome, AlarmRaise, AlarmWrite, RuleWrite};
pub use bootstrap::{BootstrapReport, BootstrapSpec, DemoDevice};
pub use credentials::{CredentialsDraft, CredentialsType, DeviceCredentials};
pub use customer::{Customer, CustomerDraft};
pub use dashboard::{Dashboard, DashboardDraft};
pub use device::{Device, DeviceDraft, DeviceFilter};
pub use device_auth::{AuthRefusal, DeviceAuth, MqttAuth};
pub use error::EntityError;
pub use page::{PageData, PageQuery, SortOrder};
pub use profile::{DeviceProfile, ProfileDraft};
pub use rpc::{PersistentRpc, RpcStatus};
pub use store::{DeviceChange, Entities};
pub use tenant::Tenant;
pub use user::{Authority, NewUser, User};

/// ThingsBoard's "no entity" id (`13814000-1dd2-11b2-8080-808080808080`): the customer of a device that
/// belongs to no customer, and the tenant of the system administrator.
pub const NULL_UUID: uuid::Uuid = uuid::Uuid::from_u128(0x13814000_1dd2_11b2_8080_808080808080);
