//! Reading one HTTP/1.1 request off a socket, for the test providers that answer by hand
//! (what they answer, byte for byte, is the point of them).

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

pub struct RawRequest {
    /// The request line and the headers, as sent (lossy UTF-8).
    pub head: String,
    pub body: Vec<u8>,
}

impl RawRequest {
    /// A header's value (the first of that name, any case), trimmed.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    /// The method and the path with its query, from the request line.
    pub fn method_and_path(&self) -> (String, String) {
        let mut first = self.head.lines().next().unwrap_or("").split(' ');
        (
            first.next().unwrap_or("").to_string(),
            first.next().unwrap_or("").to_string(),
        )
    }
}

/// The head, then as much body as Content-Length says (less if the peer closes first);
/// None if the peer closes before the head is complete.
pub async fn read_request(sock: &mut TcpStream) -> Option<RawRequest> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let mut request = RawRequest {
        head: String::from_utf8_lossy(&buf[..head_end]).to_string(),
        body: Vec::new(),
    };
    let length: usize = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    request.body = buf.split_off(head_end);
    Some(request)
}
