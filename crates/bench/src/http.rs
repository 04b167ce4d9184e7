//! A minimal HTTP/1.1 keep-alive client: one connection, one request at a time, whole bodies.
//!
//! The bench talks to one server over loopback, so a connection pool, redirects, TLS and streaming
//! bodies would only add latency and dependencies. Worker processes bind the local side to their own
//! 127.0.0.x address to get more ephemeral ports than one source address allows.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;

use crate::error::{Error, Result};

/// How long one request may take, response body included, before it fails. Telemetry reads may wait
/// up to 10 s for the server's processors to catch up, so this is well above that.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One keep-alive HTTP/1.1 connection to `addr`; reconnects once, transparently, when the server has
/// closed it.
pub struct HttpConn {
    addr: SocketAddr,
    local_ip: Option<IpAddr>,
    sender: SendRequest<Full<Bytes>>,
    /// The `Host` header: the server's address as connected to.
    host: HeaderValue,
    timeout: Duration,
}

impl HttpConn {
    /// Connects to `addr`, optionally binding the local side to `local_ip` (worker processes use 127.0.0.x).
    pub async fn connect(addr: SocketAddr, local_ip: Option<IpAddr>) -> Result<HttpConn> {
        let sender = open(addr, local_ip).await?;
        let host = HeaderValue::from_str(&addr.to_string()).map_err(|e| Error::Http {
            method: "CONNECT".into(),
            path: addr.to_string(),
            message: format!("host header: {e}"),
        })?;
        Ok(HttpConn {
            addr,
            local_ip,
            sender,
            host,
            timeout: REQUEST_TIMEOUT,
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Changes how long one request may take (default 60 s).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// One request; headers are (name, value). Sets Host and Content-Type: application/json when body
    /// non-empty. Answers the status and the whole response body, whatever the status.
    pub async fn request(
        &mut self,
        method: Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<(u16, Bytes)> {
        let fail = |message: String| Error::Http {
            method: method.to_string(),
            path: path_and_query.to_string(),
            message,
        };
        let host = self.host.clone();
        let build = || -> Result<Request<Full<Bytes>>> {
            let mut builder = Request::builder()
                .method(method.clone())
                .uri(path_and_query)
                .header(HOST, host.clone());
            if !body.is_empty() {
                builder = builder.header(CONTENT_TYPE, "application/json");
            }
            for (name, value) in headers {
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| fail(format!("header name {name:?}: {e}")))?;
                let value = HeaderValue::from_str(value)
                    .map_err(|e| fail(format!("header {name}: {e}")))?;
                builder = builder.header(name, value);
            }
            builder
                .body(Full::new(body.clone()))
                .map_err(|e| fail(format!("request: {e}")))
        };
        let mut reconnected = false;
        if self.sender.is_closed() {
            self.reconnect().await.map_err(|e| fail(e.to_string()))?;
            reconnected = true;
        }
        loop {
            let request = build()?;
            match tokio::time::timeout(self.timeout, self.send(request)).await {
                Err(_) => {
                    // The connection may still deliver the late response to the next request: drop it.
                    self.reconnect().await.map_err(|e| fail(e.to_string()))?;
                    return Err(fail(format!("no response within {:?}", self.timeout)));
                }
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(Attempt::Closed(e))) if !reconnected => {
                    tracing::debug!(addr = %self.addr, error = %e, "connection closed by the server; reconnecting");
                    self.reconnect().await.map_err(|e| fail(e.to_string()))?;
                    reconnected = true;
                }
                Ok(Err(Attempt::Closed(e) | Attempt::Failed(e))) => return Err(fail(e)),
            }
        }
    }

    async fn send(&mut self, request: Request<Full<Bytes>>) -> Result<(u16, Bytes), Attempt> {
        self.sender
            .ready()
            .await
            .map_err(|e| Attempt::Closed(e.to_string()))?;
        let response = self.sender.send_request(request).await.map_err(|e| {
            // These mean the request never got an answer because the connection went away, the
            // case a keep-alive client retries once on a fresh connection.
            if e.is_closed() || e.is_canceled() || e.is_incomplete_message() {
                Attempt::Closed(e.to_string())
            } else {
                Attempt::Failed(e.to_string())
            }
        })?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| Attempt::Failed(format!("reading the response body: {e}")))?
            .to_bytes();
        Ok((status, body))
    }

    async fn reconnect(&mut self) -> Result<()> {
        self.sender = open(self.addr, self.local_ip).await?;
        Ok(())
    }
}

/// Why one attempt failed: `Closed` may be retried on a new connection.
enum Attempt {
    Closed(String),
    Failed(String),
}

/// Opens a connection and starts its driver task, which ends when the sender is dropped or the server
/// closes the connection.
async fn open(addr: SocketAddr, local_ip: Option<IpAddr>) -> Result<SendRequest<Full<Bytes>>> {
    let context = || format!("connecting to {addr}");
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, crate::fleet::tcp_connect(addr, local_ip))
        .await
        .map_err(|_| {
            Error::io(
                context(),
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
            )
        })?
        .map_err(|e| Error::io(context(), e))?;
    // Requests are small and latency is measured: do not let Nagle hold them back.
    stream
        .set_nodelay(true)
        .map_err(|e| Error::io(context(), e))?;
    let (sender, connection) =
        http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Error::Http {
                method: "CONNECT".into(),
                path: addr.to_string(),
                message: e.to_string(),
            })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(%addr, error = %e, "HTTP connection ended");
        }
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::net::TcpStream;

    /// Reads one request head (and a body of `Content-Length` bytes); returns the head.
    async fn read_request(stream: &mut TcpStream) -> Option<String> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                while buf.len() < end + 4 + length {
                    let n = stream.read(&mut chunk).await.ok()?;
                    if n == 0 {
                        return None;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                return Some(head);
            }
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Serves `per_connection` requests per connection, answering each with its own head as the
    /// body, then closes the connection (announcing it with `Connection: close` on the last answer).
    async fn echo_server(per_connection: usize) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    for i in 1..=per_connection {
                        let Some(head) = read_request(&mut stream).await else {
                            return;
                        };
                        let close = if i == per_connection {
                            "connection: close\r\n"
                        } else {
                            ""
                        };
                        let response = format!(
                            "HTTP/1.1 201 Created\r\n{close}content-length: {}\r\n\r\n{head}",
                            head.len()
                        );
                        stream.write_all(response.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn sends_headers_and_reads_the_body() {
        let (addr, server) = echo_server(100).await;
        let mut conn = HttpConn::connect(addr, None).await.unwrap();
        let (status, body) = conn
            .request(
                Method::POST,
                "/api/x?y=1",
                &[("X-Authorization", "Bearer t")],
                Bytes::from_static(b"{}"),
            )
            .await
            .unwrap();
        assert_eq!(status, 201);
        let head = String::from_utf8(body.to_vec()).unwrap().to_lowercase();
        assert!(head.starts_with("post /api/x?y=1 http/1.1"), "{head}");
        assert!(head.contains(&format!("host: {addr}")), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(head.contains("x-authorization: bearer t"), "{head}");
        let (_, body) = conn
            .request(Method::GET, "/b", &[], Bytes::new())
            .await
            .unwrap();
        let head = String::from_utf8(body.to_vec()).unwrap().to_lowercase();
        assert!(
            !head.contains("content-type"),
            "no body, no content type: {head}"
        );
        server.abort();
    }

    #[tokio::test]
    async fn reconnects_when_the_server_closed_the_connection() {
        // The server closes every connection after one request.
        let (addr, server) = echo_server(1).await;
        let mut conn = HttpConn::connect(addr, Some("127.0.0.1".parse().unwrap()))
            .await
            .unwrap();
        for i in 0..3 {
            let (status, body) = conn
                .request(Method::GET, &format!("/{i}"), &[], Bytes::new())
                .await
                .unwrap();
            assert_eq!(status, 201);
            assert!(body.starts_with(format!("GET /{i} ").as_bytes()));
        }
        server.abort();
    }

    #[tokio::test]
    async fn connection_refused_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        assert!(HttpConn::connect(addr, None).await.is_err());
    }
}
