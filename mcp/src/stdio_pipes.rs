//! The stdio front's ends of this process's stdin and stdout. When they are pipes (as an
//! MCP host starts a stdio server), they are read and written on the runtime's own
//! reactor: tokio's `stdin()` and `stdout()` do every read and write on a blocking thread,
//! and each call's message then crosses threads twice more on its way in and out, which
//! costs a call more than the JSON it carries. Anything else (a terminal, a file, a socket)
//! keeps tokio's blocking streams.
//!
//! Each end is a duplicate of descriptor 0 or 1, so the process's own descriptors stay
//! open. The pipe's end is made non-blocking: a flag of the open pipe end, which any other
//! process holding that same end (not the host, which holds the other end) would see too;
//! the proxy's upstream children get pipes of their own, never these.

use std::os::fd::AsFd;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

/// Stdin, read on the reactor when it is a pipe.
pub fn input() -> Box<dyn AsyncRead + Unpin + Send> {
    let piped = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd);
    match piped {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    }
}

/// Stdout, written on the reactor when it is a pipe.
pub fn output() -> Box<dyn AsyncWrite + Unpin + Send> {
    let piped = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd);
    match piped {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    }
}
