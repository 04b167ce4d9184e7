//! `GET /readyz`: whether this server should be sent traffic.
//!
//! Ready means recovered and accepting: the ingest log is open (it is before anything listens) and not
//! poisoned, the time-series store takes writes, writes are not refused for lack of disk space, every partition's processor has finished its
//! startup replay, and the server is not stopping. Over the log's disk budget the server still accepts
//! writes, only slower, so that alone does not make it unready (`fleetwire_ingest_throttled` shows it).
//! Other parts can add conditions through [`Readiness::add_condition`]. `/healthz` stays "the process is
//! alive".

use parking_lot::RwLock;

use crate::AppState;

/// A check that returns why the server is not ready, or `None`.
pub type Condition = Box<dyn Fn(&AppState) -> Option<String> + Send + Sync>;

/// The conditions `/readyz` checks besides the built-in ones.
#[derive(Default)]
pub struct Readiness {
    conditions: RwLock<Vec<Condition>>,
}

impl Readiness {
    /// Adds a condition checked at every `/readyz`: the hook for state that makes the server refuse
    /// writes for a while. Keep it cheap (a few atomic loads): load balancers
    /// poll this every few seconds.
    pub fn add_condition(
        &self,
        condition: impl Fn(&AppState) -> Option<String> + Send + Sync + 'static,
    ) {
        self.conditions.write().push(Box::new(condition));
    }

    /// Why the server is not ready; empty when it is.
    pub fn reasons(&self, state: &AppState) -> Vec<String> {
        let ingest = &state.ingest;
        let mut reasons = Vec::new();
        if ingest.is_shutting_down() {
            reasons.push("the server is shutting down".to_string());
        }
        if ingest.log().is_poisoned() {
            reasons.push(
                "the ingest log refuses writes after a write or sync failure; restart the server"
                    .to_string(),
            );
        }
        match ingest.tsdb().write_state() {
            fleetwire_tsdb::WriteState::Writable => {}
            fleetwire_tsdb::WriteState::RefusedUntilReopen => reasons.push(
                "the time-series store refuses writes after a failed write; it is reopened once its disk has room"
                    .to_string(),
            ),
            fleetwire_tsdb::WriteState::RefusedUntilRestart => reasons.push(
                "the time-series store refuses writes after a failed fsync; restart the server".to_string(),
            ),
        }
        if ingest.refusing_writes() {
            reasons.push("writes are refused until disk space is freed".to_string());
        }
        let replaying = ingest.partitions_replaying();
        if !replaying.is_empty() {
            reasons.push(format!(
                "replaying the ingest log: partitions {replaying:?}"
            ));
        }
        for condition in self.conditions.read().iter() {
            reasons.extend(condition(state));
        }
        reasons
    }
}
