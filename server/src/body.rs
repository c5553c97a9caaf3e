//! Bodies: the request's buffered under a cap, and the body type the layer answers with.

use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the handler reads: the request's own body when the layer let it through, the
/// buffered one when it read it.
pub type RequestBody<B> = Either<B, Full<Bytes>>;

/// What the layer answers: the handler's body as it comes (passed through, streamed), or
/// bytes the layer holds (a buffered answer, a replay, a problem).
pub type ResponseBody<B> = Either<B, Full<Bytes>>;

/// Why a request body was not read.
pub enum Unread {
    TooLarge,
    Failed(BoxError),
}

/// Reads the whole body, refusing it once it passes `cap` bytes.
pub async fn buffer<B>(body: B, cap: usize) -> Result<Bytes, Unread>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match Limited::new(body, cap).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Unread::TooLarge),
        Err(e) => Err(Unread::Failed(e)),
    }
}
