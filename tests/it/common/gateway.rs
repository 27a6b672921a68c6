//! A tiny HTTP/1.1 client for etcd's client port: `/health` and the gRPC gateway's
//! JSON API (`/v3/kv/put`, `/v3/kv/range`), which etcd 3.4 and 3.5 both serve.
//!
//! It needs no process per request (etcdctl costs ~15 ms each) and no async
//! runtime, which suits health polling and single-key checks. Keys and values
//! travel base64-encoded, as the gateway's proto JSON mapping requires. Bulk writes
//! go over gRPC instead (`Cluster::put_many`): decoding megabytes of base64 JSON
//! caps the gateway at a quarter of gRPC's throughput.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// One keep-alive connection to an etcd client URL (`http://host:port`).
pub struct HttpConn {
    addr: SocketAddr,
    host: String,
    timeout: Duration,
    stream: Option<BufReader<TcpStream>>,
}

/// A response: status code and body.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| {
            format!(
                "HTTP {} body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

impl HttpConn {
    /// A connection (opened lazily) to `client_url`; every connect, read and write
    /// is bounded by `timeout`.
    pub fn new(client_url: &str, timeout: Duration) -> Result<Self, String> {
        let host = client_url
            .strip_prefix("http://")
            .ok_or_else(|| format!("only http:// client URLs are supported: {client_url}"))?
            .trim_end_matches('/')
            .to_string();
        let addr = host
            .to_socket_addrs()
            .map_err(|e| format!("bad client URL {client_url}: {e}"))?
            .next()
            .ok_or_else(|| format!("client URL {client_url} resolves to nothing"))?;
        Ok(HttpConn {
            addr,
            host,
            timeout,
            stream: None,
        })
    }

    /// `GET path`.
    pub fn get(&mut self, path: &str) -> Result<HttpResponse, String> {
        self.request("GET", path, b"")
    }

    /// `POST path` with a JSON body.
    pub fn post_json(
        &mut self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<HttpResponse, String> {
        let body = serde_json::to_vec(body).map_err(|e| e.to_string())?;
        self.request("POST", path, &body)
    }

    /// One request; a connection that the server closed since the last request is
    /// reopened once.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<HttpResponse, String> {
        let reused = self.stream.is_some();
        match self.request_once(method, path, body) {
            Ok(resp) => Ok(resp),
            Err(_) if reused => {
                self.stream = None;
                self.request_once(method, path, body)
            }
            Err(e) => Err(e),
        }
    }

    fn request_once(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<HttpResponse, String> {
        let result = self.exchange(method, path, body);
        if result.is_err() {
            self.stream = None;
        }
        result.map_err(|e| format!("{method} http://{}{path}: {e}", self.host))
    }

    fn exchange(&mut self, method: &str, path: &str, body: &[u8]) -> Result<HttpResponse, String> {
        if self.stream.is_none() {
            let stream = TcpStream::connect_timeout(&self.addr, self.timeout)
                .map_err(|e| format!("connect: {e}"))?;
            stream
                .set_read_timeout(Some(self.timeout))
                .and_then(|()| stream.set_write_timeout(Some(self.timeout)))
                .and_then(|()| stream.set_nodelay(true))
                .map_err(|e| e.to_string())?;
            self.stream = Some(BufReader::with_capacity(64 * 1024, stream));
        }
        let reader = self.stream.as_mut().ok_or("no connection")?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\n",
            self.host
        );
        if method != "GET" || !body.is_empty() {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let stream = reader.get_mut();
        stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body))
            .map_err(|e| format!("write: {e}"))?;
        let (response, close) = read_response(reader)?;
        if close {
            self.stream = None;
        }
        Ok(response)
    }
}

/// Reads one response; the flag says the server will close the connection.
fn read_response(reader: &mut BufReader<TcpStream>) -> Result<(HttpResponse, bool), String> {
    let mut line = String::new();
    let read_line = |reader: &mut BufReader<TcpStream>, line: &mut String| -> Result<(), String> {
        line.clear();
        match reader.read_line(line) {
            Ok(0) => Err("connection closed".to_string()),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("read: {e}")),
        }
    };
    read_line(reader, &mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {line:?}"))?;
    let mut content_length = None;
    let mut chunked = false;
    let mut close = false;
    loop {
        read_line(reader, &mut line)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => content_length = value.parse::<usize>().ok(),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            read_line(reader, &mut line)?;
            let size_hex = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| format!("bad chunk size {line:?}"))?;
            if size == 0 {
                // Trailers end with an empty line.
                loop {
                    read_line(reader, &mut line)?;
                    if line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader
                .read_exact(&mut body[start..])
                .map_err(|e| format!("read chunk: {e}"))?;
            read_line(reader, &mut line)?;
        }
    } else if let Some(len) = content_length {
        body.resize(len, 0);
        reader
            .read_exact(&mut body)
            .map_err(|e| format!("read body: {e}"))?;
    } else {
        reader
            .read_to_end(&mut body)
            .map_err(|e| format!("read body: {e}"))?;
        close = true;
    }
    Ok((HttpResponse { status, body }, close))
}

/// `GET /health` on a client URL: `Ok` when etcd answers `"health":"true"`.
pub fn health(client_url: &str, timeout: Duration) -> Result<(), String> {
    let mut conn = HttpConn::new(client_url, timeout)?;
    let resp = conn.get("/health")?;
    let json = resp.json()?;
    if resp.status == 200 && json["health"] == "true" {
        Ok(())
    } else {
        Err(format!(
            "{client_url}/health: HTTP {}: {}",
            resp.status,
            String::from_utf8_lossy(&resp.body)
        ))
    }
}

/// `POST /v3/kv/put`.
pub fn put(conn: &mut HttpConn, key: &[u8], value: &[u8]) -> Result<(), String> {
    let body = serde_json::json!({ "key": base64_encode(key), "value": base64_encode(value) });
    let resp = conn.post_json("/v3/kv/put", &body)?;
    let json = resp.json()?;
    if resp.status == 200 && json.get("header").is_some() {
        Ok(())
    } else {
        Err(format!(
            "put {}: HTTP {}: {json}",
            String::from_utf8_lossy(key),
            resp.status
        ))
    }
}

/// `POST /v3/kv/range` for one key: its value, or `None` when absent.
pub fn get(conn: &mut HttpConn, key: &[u8], serializable: bool) -> Result<Option<Vec<u8>>, String> {
    let body = serde_json::json!({ "key": base64_encode(key), "serializable": serializable });
    let resp = conn.post_json("/v3/kv/range", &body)?;
    let json = resp.json()?;
    if resp.status != 200 || json.get("header").is_none() {
        return Err(format!(
            "get {}: HTTP {}: {json}",
            String::from_utf8_lossy(key),
            resp.status
        ));
    }
    match json["kvs"].get(0) {
        None => Ok(None),
        Some(kv) => {
            let value = kv["value"].as_str().unwrap_or("");
            base64_decode(value).map(Some)
        }
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64, padding optional.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            break;
        }
        let v = ALPHABET
            .iter()
            .position(|&a| a == c)
            .ok_or_else(|| format!("invalid base64 byte {c:#x}"))?;
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}
