//! The state shared by every connection and request.

use std::sync::Arc;

use crate::activity::Activity;
use crate::api::auth::Auth;
use crate::config::Config;
use crate::ingest::Ingest;
use crate::mqtt::sessions::close_reason;
use crate::mqtt::Sessions;
use crate::rpc::Rpcs;
use fleetwire_entities::{DeviceChange, Entities};

/// Cheap to clone: one `Arc`.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub config: Config,
    /// Tenants, users, device profiles, devices, credentials, dashboards.
    pub entities: Entities,
    /// JWT signing and verification.
    pub auth: Auth,
    /// The write path (log) and the read path (time-series store) of device data.
    pub ingest: Ingest,
    /// Connected MQTT device sessions.
    pub sessions: Sessions,
    /// Device activity: `active`, `lastActivityTime` and the inactivity check.
    pub activity: Arc<Activity>,
    /// Server-side RPC requests waiting for delivery or for their reply.
    pub rpcs: Rpcs,
    /// Devices that announced they may be claimed.
    pub claims: crate::claim::Claims,
    /// Rate limits and the failed-authentication limit, with their buckets.
    pub limits: crate::limits::Limits,
    /// What `/readyz` checks besides recovery (see [`crate::metrics::readiness`]).
    pub readiness: crate::metrics::readiness::Readiness,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create data dir {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("entity store: {0}")]
    Entities(#[from] fleetwire_entities::EntityError),
    #[error("auth: {0}")]
    Auth(String),
    #[error("ingest: {0}")]
    Ingest(#[from] crate::ingest::IngestError),
}

impl AppState {
    /// Opens the stores under `config.data_dir` (creating it), recovering the ingest log.
    pub fn open(config: Config) -> Result<AppState, StartError> {
        std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let entities = Entities::open(&config.data_dir.join("entities.sqlite3"))?;
        let auth = Auth::new(&config.auth, &config.data_dir)
            .map_err(|e| StartError::Auth(e.to_string()))?;
        let activity = Arc::new(Activity::new(config.activity.clone()));
        let ingest = Ingest::open(&config, &entities, activity.clone())?;
        activity
            .load(ingest.attributes(), entities.device_count())
            .map_err(|e| StartError::Ingest(crate::ingest::IngestError::Attributes(e)))?;
        let state = AppState(Arc::new(Shared {
            entities,
            auth,
            ingest,
            sessions: Sessions::default(),
            activity,
            rpcs: Rpcs::default(),
            claims: Default::default(),
            limits: crate::limits::Limits::new(&config.rate_limits),
            config,
            readiness: Default::default(),
        }));
        // A deleted device or changed credentials end the device's session (reference 1.1). The callback
        // holds a weak reference so the state can still be dropped.
        let weak = Arc::downgrade(&state.0);
        state.entities.on_device_change(Box::new(move |change| {
            if let Some(shared) = weak.upgrade() {
                let device = match change {
                    DeviceChange::Deleted(id) | DeviceChange::CredentialsChanged(id) => id,
                };
                shared
                    .sessions
                    .close_device(device, close_reason::ADMINISTRATIVE_ACTION);
            }
        }));
        Ok(state)
    }
}
