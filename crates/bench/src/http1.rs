//! A minimal HTTP/1.1 keep-alive client over a tokio `TcpStream`: one request in flight
//! per connection, `Content-Length` bodies only (what actix answers for JSON). Hand-rolled
//! so that the load generator's own cost per request is a write, a read and a header scan,
//! which matters when client, service and Postgres share two cores.

use anyhow::{Context, bail};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where the requests go and with which key.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub api_key: String,
    pub ask: Ask,
}

/// What each request of a load asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// `POST /v1/token` for the key's subject and provider.
    Token,
    /// `GET /v1/proxy/<provider><path>` as the key's subject.
    Proxied(&'static str),
    /// `GET <path>` straight to the upstream (no key).
    Direct(&'static str),
}

impl Target {
    /// `/v1/token` requests to `addr` with `api_key`.
    pub fn token(addr: SocketAddr, api_key: &str) -> Self {
        Self { addr, api_key: api_key.to_owned(), ask: Ask::Token }
    }

    /// The bytes of the request [`Self::ask`] makes for one subject and provider.
    pub fn request(&self, out: &mut Vec<u8>, subject: &str, provider: &str) {
        let path = match self.ask {
            Ask::Token => return self.token_request(out, subject, provider),
            Ask::Proxied(path) | Ask::Direct(path) => path,
        };
        out.clear();
        out.extend_from_slice(b"GET ");
        if self.ask != Ask::Direct(path) {
            out.extend_from_slice(b"/v1/proxy/");
            out.extend_from_slice(provider.as_bytes());
        }
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.addr.to_string().as_bytes());
        if self.ask != Ask::Direct(path) {
            out.extend_from_slice(b"\r\nAuthorization: Bearer ");
            out.extend_from_slice(self.api_key.as_bytes());
            out.extend_from_slice(b"\r\nMCP-Connect-Subject: ");
            out.extend_from_slice(subject.as_bytes());
        }
        out.extend_from_slice(b"\r\n\r\n");
    }

    /// The bytes of `POST /v1/token` for one subject and provider.
    pub fn token_request(&self, out: &mut Vec<u8>, subject: &str, provider: &str) {
        let body = format!(r#"{{"subject":"{subject}","provider":"{provider}"}}"#);
        out.clear();
        out.extend_from_slice(b"POST /v1/token HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.addr.to_string().as_bytes());
        out.extend_from_slice(b"\r\nAuthorization: Bearer ");
        out.extend_from_slice(self.api_key.as_bytes());
        out.extend_from_slice(b"\r\nContent-Type: application/json\r\nContent-Length: ");
        out.extend_from_slice(body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(body.as_bytes());
    }

    pub fn get_request(&self, path: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", self.addr).into_bytes()
    }
}

/// One response; the body stays in the connection's buffer until the next request.
#[derive(Debug)]
pub struct Response<'a> {
    pub status: u16,
    pub body: &'a [u8],
}

impl Response<'_> {
    /// A `/v1/token` answer that handed out a token.
    pub fn is_connected(&self) -> bool {
        self.status == 200 && contains(self.body, br#""status":"connected""#)
    }

    /// The answer `ask` wants: a hand-out, or the upstream's 200.
    pub fn answers(&self, ask: Ask) -> bool {
        match ask {
            Ask::Token => self.is_connected(),
            Ask::Proxied(_) | Ask::Direct(_) => self.status == 200,
        }
    }
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn find_header_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = from.saturating_sub(3);
    buf.get(start..)?.windows(4).position(|w| w == b"\r\n\r\n").map(|p| start + p)
}

/// A keep-alive connection.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` that belong to the last response (dropped before the next read).
    consumed: usize,
    /// The server said `Connection: close`: the caller must reconnect.
    pub closed: bool,
}

/// Largest response accepted; a token answer is well under 1 KiB.
const MAX_RESPONSE: usize = 1 << 20;

impl Conn {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr).await.with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Self { stream, buf: Vec::with_capacity(8 * 1024), consumed: 0, closed: false })
    }

    /// Writes one request and reads its response.
    pub async fn send(&mut self, request: &[u8]) -> anyhow::Result<Response<'_>> {
        if self.closed {
            bail!("connection closed by the server");
        }
        self.buf.drain(..self.consumed);
        self.consumed = 0;
        self.stream.write_all(request).await.context("write request")?;
        let mut scanned = 0;
        let header_end = loop {
            if let Some(end) = find_header_end(&self.buf, scanned) {
                break end;
            }
            scanned = self.buf.len();
            self.read_more().await?;
        };
        let (status, length, close) = parse_head(self.buf.get(..header_end).unwrap_or_default())?;
        let body_start = header_end + 4;
        let body_end = body_start + length;
        if body_end > MAX_RESPONSE {
            bail!("response of {length} bytes is too large");
        }
        while self.buf.len() < body_end {
            self.read_more().await?;
        }
        self.consumed = body_end;
        self.closed = close;
        Ok(Response { status, body: self.buf.get(body_start..body_end).unwrap_or_default() })
    }

    async fn read_more(&mut self) -> anyhow::Result<()> {
        let mut chunk = [0u8; 8 * 1024];
        let n = self.stream.read(&mut chunk).await.context("read response")?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        self.buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        Ok(())
    }
}

/// Status, content length and whether the server closes the connection afterwards.
fn parse_head(head: &[u8]) -> anyhow::Result<(u16, usize, bool)> {
    let text = std::str::from_utf8(head).context("response head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse::<u16>().ok())
        .with_context(|| format!("bad status line {status_line:?}"))?;
    let mut length = 0;
    let mut close = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().with_context(|| format!("bad content-length {value:?}"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") && !value.eq_ignore_ascii_case("identity") {
            bail!("transfer-encoding {value:?} is not supported by the bench client");
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    Ok((status, length, close))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gives_status_length_and_close() {
        let (s, l, c) = parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 42\r\nconnection: close").unwrap();
        assert_eq!((s, l, c), (200, 42, true));
        let (s, l, c) = parse_head(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0").unwrap();
        assert_eq!((s, l, c), (401, 0, false));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked").is_err());
    }

    #[test]
    fn the_header_end_is_found_across_reads() {
        let buf = b"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody";
        assert_eq!(find_header_end(buf, 0), Some(21));
        assert_eq!(find_header_end(buf, 24), Some(21));
        assert_eq!(find_header_end(b"HTTP/1.1 200 OK\r\n", 0), None);
    }
}
