//! Entry points for the cargo-fuzz targets in `fuzz/` (`chunk_decode`), and for nothing else: not
//! part of the crate's API, hidden from its docs, and free to change with the fuzz targets.
//!
//! The chunk codec is crate-private; these wrappers speak only public types (`i64`, [`Value`]) so
//! that `Points` and the chunk internals stay private.

use fleetwire_model::Value;

use crate::chunk;
use crate::points::Points;

/// The chunk header fields: point count, first ts, last ts.
pub type ChunkHeader = (u32, i64, i64);

/// Decodes and verifies a chunk blob into its header and its points, in ts order.
pub fn chunk_decode(blob: &[u8]) -> Result<(ChunkHeader, Vec<(i64, Value)>), String> {
    let header = chunk::header(blob).map_err(|chunk::Invalid(reason)| reason)?;
    let points = chunk::decode(blob).map_err(|chunk::Invalid(reason)| reason)?;
    let points = (0..points.len())
        .map(|i| (points.ts()[i], points.get(i).to_value()))
        .collect();
    Ok((
        (header.point_count, header.first_ts, header.last_ts),
        points,
    ))
}

/// Encodes points as the head would hold them (written in this order, an equal ts replacing the
/// earlier value); `Ok(None)` for no points, which is not a chunk.
pub fn chunk_encode(points: &[(i64, Value)]) -> Result<Option<Vec<u8>>, String> {
    let mut head = Points::new();
    for (ts, value) in points {
        head.upsert(*ts, value);
    }
    if head.is_empty() {
        return Ok(None);
    }
    chunk::encode(&head)
        .map(Some)
        .map_err(|chunk::EncodeError(reason)| reason)
}
