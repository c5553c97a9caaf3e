//! The stdio front's transport: one JSON-RPC message per line on stdin, one answer per line
//! on stdout. rmcp's own stdio transport drops a line that does not parse, unanswered, and
//! answers JSON that is no message without `"id": null`; here every line is read first
//! (mcp/src/malformed.rs) and a malformed one is answered on stdout. A task reads stdin and
//! a task writes stdout, so that the answers to malformed lines and rmcp's own messages
//! reach stdout whole, one line each, never interleaved.

use std::future::Future;
use std::io;

use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::malformed::{self, Read};

/// The longest line taken: rmcp's own stdio bound (a larger one is answered `too_large`).
pub const MAX_LINE_BYTES: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// Messages read and not yet taken by rmcp: past it, stdin is not read (back-pressure).
const READ_AHEAD: usize = 16;
/// Lines waiting for stdout.
const WRITE_AHEAD: usize = 64;

/// rmcp's end of the front.
pub struct StdioFront {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    outgoing: mpsc::Sender<String>,
}

/// The front over this process's stdin and stdout, and the writer's task: awaiting it once
/// the session is over lets the last answers reach stdout before the process ends.
pub fn open() -> (StdioFront, JoinHandle<()>) {
    #[cfg(unix)]
    let (input, output) = (crate::stdio_pipes::input(), crate::stdio_pipes::output());
    #[cfg(not(unix))]
    let (input, output) = (tokio::io::stdin(), tokio::io::stdout());
    open_on(input, output, MAX_LINE_BYTES)
}

pub fn open_on<R, W>(input: R, output: W, max_line: usize) -> (StdioFront, JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (to_rmcp, incoming) = mpsc::channel(READ_AHEAD);
    let (outgoing, lines) = mpsc::channel(WRITE_AHEAD);
    // The reader's hold on stdout is weak: once rmcp lets go of the front, the writer
    // ends with what it has, even while stdin stays open.
    tokio::spawn(read_lines(
        BufReader::new(input),
        max_line,
        to_rmcp,
        outgoing.downgrade(),
    ));
    let written = tokio::spawn(write_lines(output, lines));
    (StdioFront { incoming, outgoing }, written)
}

/// Reads stdin line by line until it ends: messages go to rmcp, refusals to stdout.
async fn read_lines<R: AsyncBufRead + Unpin>(
    mut input: R,
    max_line: usize,
    to_rmcp: mpsc::Sender<ClientJsonRpcMessage>,
    answers: mpsc::WeakSender<String>,
) {
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = match bounded_line(&mut input, &mut line, max_line).await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(error = %e, "stdin cannot be read: the session ends");
                return;
            }
        };
        let refusal = match read {
            Line::End => return,
            Line::TooLong => malformed::too_large("line", max_line),
            Line::Whole => {
                let text = line.strip_suffix(b"\n").unwrap_or(&line);
                let text = text.strip_suffix(b"\r").unwrap_or(text);
                // A line separator alone is no message (rmcp skips blank lines too).
                if text.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match malformed::read(text) {
                    Read::Message(message) => {
                        if to_rmcp.send(*message).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Read::Dropped(why) => {
                        tracing::info!("dropped {why}");
                        continue;
                    }
                    Read::Refused(refusal) => refusal,
                }
            }
        };
        tracing::info!(code = refusal.code.0, kind = refusal.kind, detail = %refusal.detail, "a malformed line answered");
        let Some(answers) = answers.upgrade() else {
            return;
        };
        if answers.send(refusal.answer().to_string()).await.is_err() {
            return;
        }
    }
}

enum Line {
    /// A line (its newline included, if the input did not end first) is in the buffer.
    Whole,
    /// The line was over the bound: what was read of it is dropped, and the rest skipped.
    TooLong,
    /// The input ended.
    End,
}

/// One line, never buffering more than `max` bytes of it.
async fn bounded_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> io::Result<Line> {
    let mut skipping = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (skipping, line.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::End,
                // A last line without its newline is still a line.
                (false, false) => Line::Whole,
            });
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |at| at + 1);
        if !skipping && line.len() + take > max {
            line.clear();
            skipping = true;
        }
        if !skipping {
            line.extend_from_slice(&available[..take]);
        }
        input.consume(take);
        if newline.is_some() {
            return Ok(if skipping { Line::TooLong } else { Line::Whole });
        }
    }
}

/// Writes each line whole, until every sender is gone or stdout is closed.
async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut lines: mpsc::Receiver<String>) {
    while let Some(mut line) = lines.recv().await {
        line.push('\n');
        if let Err(e) = async {
            output.write_all(line.as_bytes()).await?;
            output.flush().await
        }
        .await
        {
            tracing::warn!(error = %e, "stdout cannot be written: the session ends");
            return;
        }
    }
}

impl Transport<RoleServer> for StdioFront {
    type Error = io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let outgoing = self.outgoing.clone();
        async move {
            let line = serde_json::to_string(&item)?;
            outgoing
                .send(line)
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed"))
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(mut input: &[u8], max: usize) -> Vec<Result<String, &'static str>> {
        let mut out = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match bounded_line(&mut input, &mut line, max).await.unwrap() {
                Line::End => return out,
                Line::TooLong => out.push(Err("too long")),
                Line::Whole => out.push(Ok(String::from_utf8_lossy(&line).into_owned())),
            }
        }
    }

    #[tokio::test]
    async fn a_line_over_the_bound_is_skipped_to_its_newline() {
        let got = lines(b"short\nxxxxxxxxxxxxxxxxxxxx\nnext\nlast", 8).await;
        assert_eq!(
            got,
            vec![
                Ok("short\n".to_string()),
                Err("too long"),
                Ok("next\n".to_string()),
                // A last line without its newline is still a line.
                Ok("last".to_string()),
            ]
        );
        assert_eq!(lines(b"xxxxxxxxxxxx", 4).await, vec![Err("too long")]);
    }
}
