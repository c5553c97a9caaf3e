//! Errors that come through a PL/Proxy proxy (sql/proxy/, docs/scaling.md). PL/Proxy
//! re-raises a partition's error with its SQLSTATE but words it `<function>(<n>):
//! [<partition>] REMOTE ERROR: <message>`, with `Remote detail: ` and `Remote hint: `
//! before the detail and hint; its own failures to reach a partition read `PL/Proxy
//! function <function>(<n>): [<partition>] <what failed>` (SQLSTATE XX000). The client
//! gives a partition's error in the partition's own words, so that an error reads the same
//! through a proxy as from one server, and keeps which partition answered.

/// What a proxy's error message says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Proxied<'a> {
    /// The partition's own error, in its words.
    Remote {
        partition: &'a str,
        message: &'a str,
    },
    /// PL/Proxy's failure to talk to the partition: `connect` when it could not connect
    /// (nothing was sent), else the connection failed with the call in flight.
    Transport {
        partition: &'a str,
        message: &'a str,
        connect: bool,
    },
}

/// `<function>(<n>): [<partition>] <rest>`: the partition and the rest.
fn partition_and_rest(message: &str) -> Option<(&str, &str)> {
    let (call, rest) = message.split_once("): [")?;
    let (_, args) = call.rsplit_once('(')?;
    if args.is_empty() || !args.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.split_once("] ")
}

pub(crate) fn parse(message: &str) -> Option<Proxied<'_>> {
    if let Some(own) = message.strip_prefix("PL/Proxy function ") {
        let (partition, message) = partition_and_rest(own)?;
        // libpq's words for a connection that could not be made (PQconnectPoll).
        let connect =
            message.starts_with("PQconnectPoll") || message.contains("connection to server");
        return Some(Proxied::Transport {
            partition,
            message,
            connect,
        });
    }
    let (partition, rest) = partition_and_rest(message)?;
    let message = rest.strip_prefix("REMOTE ERROR: ")?;
    Some(Proxied::Remote { partition, message })
}

/// A partition's detail or hint without PL/Proxy's label.
pub(crate) fn unlabelled<'a>(text: &'a str, label: &str) -> &'a str {
    text.strip_prefix(label).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partitions_error_comes_back_in_its_own_words() {
        assert_eq!(
            parse("public.idem_begin(9): [app_p0] REMOTE ERROR: scope must not be blank"),
            Some(Proxied::Remote {
                partition: "app_p0",
                message: "scope must not be blank"
            })
        );
        assert_eq!(
            unlabelled("Remote detail: The key", "Remote detail: "),
            "The key"
        );
        assert_eq!(unlabelled("The key", "Remote detail: "), "The key");
    }

    #[test]
    fn a_partition_out_of_reach_is_told_apart_from_a_connection_lost_mid_call() {
        let down = "PL/Proxy function public.idem_begin(9): [app_p1] PQconnectPoll: connection to \
                    server at \"10.0.0.2\", port 5432 failed: Connection refused";
        assert!(matches!(
            parse(down),
            Some(Proxied::Transport {
                partition: "app_p1",
                connect: true,
                ..
            })
        ));
        let lost = "PL/Proxy function public.idem_complete(6): [app_p1] connection lost";
        assert!(matches!(
            parse(lost),
            Some(Proxied::Transport { connect: false, .. })
        ));
    }

    #[test]
    fn anything_else_is_not_a_proxys() {
        assert_eq!(parse("scope must not be blank"), None);
        assert_eq!(parse("f(x): [p] REMOTE ERROR: y"), None);
        assert_eq!(
            parse("lease lost: this fence does not hold the record"),
            None
        );
    }
}
