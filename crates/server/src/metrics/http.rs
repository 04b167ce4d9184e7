//! Refusals of the HTTP device API, counted from the status it answers with, so its handlers need no
//! metric calls of their own.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

use super::{refused, Reason, Transport};

/// Middleware on the device API routes: every 4xx/5xx answer is a refusal with the reason its status
/// means. A long-poll that simply timed out (408) is not a refusal.
pub async fn count_refusals(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let named = response
        .extensions()
        .get::<crate::api::error::Refusal>()
        .map(|r| r.0);
    if let Some(reason) = named.or_else(|| reason_of(response.status())) {
        refused(Transport::Http, reason);
    }
    response
}

fn reason_of(status: StatusCode) -> Option<Reason> {
    Some(match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Reason::Auth,
        StatusCode::NOT_FOUND => Reason::NotFound,
        StatusCode::PAYLOAD_TOO_LARGE => Reason::TooLarge,
        StatusCode::TOO_MANY_REQUESTS => Reason::RateLimited,
        StatusCode::REQUEST_TIMEOUT => return None,
        s if s.is_server_error() => Reason::Unavailable,
        s if s.is_client_error() => Reason::Malformed,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_reasons() {
        assert_eq!(reason_of(StatusCode::OK), None);
        assert_eq!(reason_of(StatusCode::REQUEST_TIMEOUT), None);
        assert_eq!(reason_of(StatusCode::UNAUTHORIZED), Some(Reason::Auth));
        assert_eq!(reason_of(StatusCode::BAD_REQUEST), Some(Reason::Malformed));
        assert_eq!(
            reason_of(StatusCode::PAYLOAD_TOO_LARGE),
            Some(Reason::TooLarge)
        );
        assert_eq!(
            reason_of(StatusCode::TOO_MANY_REQUESTS),
            Some(Reason::RateLimited)
        );
        assert_eq!(
            reason_of(StatusCode::SERVICE_UNAVAILABLE),
            Some(Reason::Unavailable)
        );
    }
}
