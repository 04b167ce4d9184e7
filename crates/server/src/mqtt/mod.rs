//! The MQTT listener: accepts connections and runs one task per connection.
//!
//! - [`connection`]: CONNECT, authentication, the read-handle-ack loop of one connection.
//! - [`requests`]: device requests the server answers itself (built-in RPC, attribute requests).
//! - [`sessions`]: one session per device; eviction and administrative closes.
//! - [`topics`]: what a device topic means and which subscriptions are granted.

pub mod connection;
pub mod requests;
pub mod sessions;
pub mod topics;

pub use sessions::Sessions;

use tokio::net::TcpListener;

use crate::AppState;

/// Accepts connections until the listener fails; each connection runs in its own task.
pub async fn run(state: AppState, listener: TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning; existing connections keep working.
                crate::sustained_warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        crate::metrics::mqtt_accepted();
        let state = state.clone();
        tokio::spawn(async move {
            let _counted = state.sessions.connection_opened();
            connection::serve(state.clone(), stream, peer).await;
        });
    }
}
