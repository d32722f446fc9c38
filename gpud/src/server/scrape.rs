//! The optional metrics listener: `GET /metrics` over plain HTTP/1.1 on a Unix socket or a
//! loopback TCP port. Each scrape asks the hub for the exposition.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::listener::SocketLock;
use crate::config::MetricsListen;
use crate::hub::{Command, Inspect};
use crate::metrics::CONTENT_TYPE;

/// Largest request head read.
const MAX_HEAD: usize = 8192;
/// Time a scraper gets to send its request, and the hub to answer.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes served at once; more connections are closed at once.
const CONCURRENT: usize = 16;

/// A bound metrics listener; serving stops when it is dropped.
pub struct Scrape {
    task: JoinHandle<()>,
    /// A Unix socket's path, and its lock (dropped after the socket is removed).
    path: Option<(PathBuf, SocketLock)>,
}

impl Drop for Scrape {
    fn drop(&mut self) {
        self.task.abort();
        if let Some((p, _lock)) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Binds `listen` and serves scrapes from the hub. Call inside a tokio runtime.
pub async fn start(listen: &MetricsListen, hub: mpsc::Sender<Command>) -> std::io::Result<Scrape> {
    let permits = Arc::new(Semaphore::new(CONCURRENT));
    let scrape = match listen {
        MetricsListen::Tcp(addr) => {
            let listener = TcpListener::bind(addr).await?;
            let task = tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((stream, _)) => spawn_one(stream, &hub, &permits),
                        Err(e) => pause(e).await,
                    }
                }
            });
            Scrape { task, path: None }
        }
        MetricsListen::Unix(path) => {
            // Readable by any local user, as D-Bus status is: a scraper proxy runs as its own user.
            let (listener, lock): (UnixListener, SocketLock) =
                super::listener::bind(path, 0o666, None)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
            let task = tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((stream, _)) => spawn_one(stream, &hub, &permits),
                        Err(e) => pause(e).await,
                    }
                }
            });
            Scrape {
                task,
                path: Some((path.clone(), lock)),
            }
        }
    };
    info!(listen = %listen, "serving metrics");
    Ok(scrape)
}

async fn pause(e: std::io::Error) {
    warn!(error = %e, "metrics accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

fn spawn_one<S>(stream: S, hub: &mpsc::Sender<Command>, permits: &Arc<Semaphore>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(permit) = permits.clone().try_acquire_owned() else {
        debug!("too many concurrent scrapes; closing one");
        return;
    };
    let hub = hub.clone();
    tokio::spawn(async move {
        if let Err(e) = tokio::time::timeout(TIMEOUT * 2, serve(stream, hub)).await {
            debug!(error = %e, "scrape timed out");
        }
        drop(permit);
    });
}

/// Answers one request and closes the connection.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, hub: mpsc::Sender<Command>) {
    let head = match tokio::time::timeout(TIMEOUT, read_head(&mut stream)).await {
        Ok(Some(head)) => head,
        _ => return,
    };
    let (status, body) = match route(&head) {
        Ok(()) => match metrics(&hub).await {
            Some(text) => ("200 OK", text),
            None => ("503 Service Unavailable", "gpud is stopping\n".to_string()),
        },
        Err(status) => (status, format!("{status}\n")),
    };
    let head_only = head.starts_with("HEAD ");
    let content_type = if status.starts_with("200") {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        response.push_str(&body);
    }
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Reads up to the blank line that ends the request head.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() + n > MAX_HEAD {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(buf).ok()
}

/// Checks the request line: `GET /metrics` (or HEAD); anything else is an HTTP error status.
fn route(head: &str) -> Result<(), &'static str> {
    let mut parts = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => Ok(()),
        ("GET" | "HEAD", _) => Err("404 Not Found"),
        _ => Err("405 Method Not Allowed"),
    }
}

async fn metrics(hub: &mpsc::Sender<Command>) -> Option<String> {
    let (tx, rx) = oneshot::channel();
    hub.send(Command::Inspect(Inspect::Metrics(tx)))
        .await
        .ok()?;
    tokio::time::timeout(TIMEOUT, rx).await.ok()?.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Ok(()));
        assert_eq!(route("HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"), Ok(()));
        assert_eq!(route("GET / HTTP/1.1\r\n\r\n"), Err("404 Not Found"));
        assert_eq!(
            route("POST /metrics HTTP/1.1\r\n\r\n"),
            Err("405 Method Not Allowed")
        );
        assert_eq!(route(""), Err("405 Method Not Allowed"));
    }
}
