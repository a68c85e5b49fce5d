//! Record batches as gRPC-framed `FlightData` messages, without copying the
//! rows. arrow-flight's encoder copies each batch's buffers into one IPC
//! body, and tonic's protobuf codec copies that body again into its frame
//! buffer. Here arrow's `StreamEncoder` lays the batch out as an Arrow IPC
//! stream whose body parts are the arrays' own buffers; each message is
//! split off that stream and framed as a `FlightData` (`data_header`, field
//! 2, then `data_body`, field 1000) whose body is those same buffers, shared
//! with the socket writes. Only the framing and small pieces are copied.
//!
//! The IPC stream layout (a continuation marker, the header's length, the
//! flatbuffer header, then `bodyLength` bytes) is Arrow's published format,
//! so splitting it does not depend on how the encoder builds its buffers.

use std::collections::VecDeque;

use bytes::{BufMut as _, Bytes, BytesMut};
use datafusion::arrow::{
    array::RecordBatch,
    buffer::Buffer,
    datatypes::{DataType, Field, Fields, Schema},
    error::ArrowError,
    ipc::{
        MessageHeader, root_as_message,
        writer::{IpcWriteOptions, StreamEncoder},
    },
};
use prost::encoding::{WireType, encode_key, encode_varint};

/// `FlightData.data_header`'s field number.
const DATA_HEADER_FIELD: u32 = 2;
/// `FlightData.data_body`'s field number.
const DATA_BODY_FIELD: u32 = 1000;

/// A batch whose buffers hold more than this is sent as several messages
/// (as arrow-flight's encoder does): gRPC clients cap a message's size
/// (4 MiB by default in grpc-go and grpc-java).
pub const MAX_MESSAGE_BYTES: usize = 2 * 1024 * 1024;

/// Pieces shorter than this are copied into the chunk being built; longer
/// ones are sent as they are. HTTP/2 sends at most 16 KiB per frame, so a
/// shorter chunk of its own would only add a frame.
const SHARE_FROM_BYTES: usize = 16 * 1024;

/// Whether `schema` can be sent this way. Dictionaries are not: Flight
/// clients are sent their values (arrow-flight's encoder hydrates them),
/// which takes a copy anyway.
pub fn sendable(schema: &Schema) -> bool {
    !schema.fields().iter().any(|field| has_dictionary(field))
}

fn has_dictionary(field: &Field) -> bool {
    fn of(data_type: &DataType) -> bool {
        match data_type {
            DataType::Dictionary(_, _) => true,
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => has_dictionary(f),
            DataType::Struct(fields) => fields.iter().any(|f| has_dictionary(f)),
            DataType::Union(fields, _) => fields.iter().any(|(_, f)| has_dictionary(f)),
            DataType::RunEndEncoded(ends, values) => has_dictionary(ends) || has_dictionary(values),
            _ => false,
        }
    }
    of(field.data_type())
}

/// Encodes one result's batches into the gRPC body of a `DoGet` answer.
pub struct FlightFrames {
    encoder: StreamEncoder,
    /// The result's columns: every batch must have them (the client decodes
    /// each message with the schema sent first).
    fields: Fields,
}

impl FlightFrames {
    /// Fails for a schema Arrow IPC cannot carry.
    pub fn new(schema: &Schema) -> Result<Self, ArrowError> {
        Ok(Self {
            encoder: StreamEncoder::try_new_with_options(schema, IpcWriteOptions::default())?,
            fields: schema.fields().clone(),
        })
    }

    /// The schema's message (sent first, also when no row follows).
    pub fn schema(schema: &Schema) -> Result<Vec<Bytes>, ArrowError> {
        let encoder = StreamEncoder::try_new_with_options(schema, IpcWriteOptions::default())?;
        let mut chunks = Chunks::default();
        for message in messages(encoder.finish()?)? {
            message.frame_into(&mut chunks)?;
        }
        Ok(chunks.finish())
    }

    /// `batch` as the chunks of one gRPC message per record batch (more
    /// than one when it is large), the schema's message left out.
    pub fn batch(&mut self, batch: &RecordBatch) -> Result<Vec<Bytes>, ArrowError> {
        if batch.schema_ref().fields() != &self.fields {
            return Err(ArrowError::SchemaError(
                "a batch's columns differ from the result's schema".into(),
            ));
        }
        let mut chunks = Chunks::default();
        for piece in pieces(batch) {
            for message in messages(self.encoder.encode(&piece)?)? {
                if message.kind != MessageHeader::Schema {
                    message.frame_into(&mut chunks)?;
                }
            }
        }
        Ok(chunks.finish())
    }
}

/// `batch` cut by rows into pieces of at most `MAX_MESSAGE_BYTES` of buffers
/// each (zero-copy slices).
fn pieces(batch: &RecordBatch) -> Vec<RecordBatch> {
    let bytes: usize = batch
        .columns()
        .iter()
        .map(|column| column.get_buffer_memory_size())
        .sum();
    let count = bytes.div_ceil(MAX_MESSAGE_BYTES).max(1);
    let rows = batch.num_rows();
    if count == 1 || rows <= 1 {
        return vec![batch.clone()];
    }
    let per_piece = rows.div_ceil(count);
    (0..rows)
        .step_by(per_piece)
        .map(|start| batch.slice(start, per_piece.min(rows - start)))
        .collect()
}

/// One IPC message of the stream: its flatbuffer header and its body.
struct IpcMessage {
    kind: MessageHeader,
    header: Bytes,
    body: Vec<Bytes>,
    body_len: usize,
}

impl IpcMessage {
    /// Appends this message as one gRPC message holding a `FlightData`.
    fn frame_into(self, chunks: &mut Chunks) -> Result<(), ArrowError> {
        let mut fields = BytesMut::with_capacity(32);
        encode_key(DATA_HEADER_FIELD, WireType::LengthDelimited, &mut fields);
        encode_varint(self.header.len() as u64, &mut fields);
        let header_field_len = fields.len() + self.header.len();
        let mut body_key = BytesMut::with_capacity(16);
        if self.body_len > 0 {
            encode_key(DATA_BODY_FIELD, WireType::LengthDelimited, &mut body_key);
            encode_varint(self.body_len as u64, &mut body_key);
        }
        let message_len = header_field_len + body_key.len() + self.body_len;
        let message_len = u32::try_from(message_len)
            .map_err(|_| ArrowError::IpcError("a row too large for one gRPC message".into()))?;
        let mut prefix = [0u8; 5];
        prefix[1..].copy_from_slice(&message_len.to_be_bytes());
        chunks.copy(&prefix);
        chunks.copy(&fields);
        chunks.push(self.header);
        chunks.copy(&body_key);
        for part in self.body {
            chunks.push(part);
        }
        Ok(())
    }
}

/// The messages of a whole Arrow IPC stream laid out in `buffers`, up to its
/// end-of-stream marker, each body as slices of those buffers.
fn messages(buffers: Vec<Buffer>) -> Result<Vec<IpcMessage>, ArrowError> {
    let mut stream = Rope::new(buffers);
    let mut messages = Vec::new();
    while stream.remaining() > 0 {
        let mut len = u32::from_le_bytes(stream.array()?);
        if len == u32::MAX {
            // The continuation marker of the current format.
            len = u32::from_le_bytes(stream.array()?);
        }
        if len == 0 {
            break;
        }
        let header = Bytes::from(stream.copy(len as usize)?);
        let message = root_as_message(&header).map_err(|e| {
            ArrowError::IpcError(format!("the encoder wrote an unreadable header: {e}"))
        })?;
        let kind = message.header_type();
        let body_len = usize::try_from(message.bodyLength())
            .map_err(|_| ArrowError::IpcError("a negative body length".into()))?;
        let body = stream.share(body_len)?;
        messages.push(IpcMessage {
            kind,
            header,
            body,
            body_len,
        });
    }
    Ok(messages)
}

/// Buffers read front to back as one byte string.
struct Rope {
    parts: VecDeque<Buffer>,
}

impl Rope {
    fn new(parts: Vec<Buffer>) -> Self {
        Self {
            parts: parts.into_iter().filter(|part| !part.is_empty()).collect(),
        }
    }

    fn remaining(&self) -> usize {
        self.parts.iter().map(Buffer::len).sum()
    }

    fn short() -> ArrowError {
        ArrowError::IpcError("the encoder's stream ended inside a message".into())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ArrowError> {
        let bytes = self.copy(N)?;
        Ok(bytes.try_into().expect("copy took N bytes"))
    }

    /// The next `len` bytes, copied (headers and lengths: small).
    fn copy(&mut self, len: usize) -> Result<Vec<u8>, ArrowError> {
        let mut out = Vec::with_capacity(len);
        for part in self.share(len)? {
            out.extend_from_slice(&part);
        }
        Ok(out)
    }

    /// The next `len` bytes as slices of the buffers they are in.
    fn share(&mut self, mut len: usize) -> Result<Vec<Bytes>, ArrowError> {
        let mut out = Vec::new();
        while len > 0 {
            let part = self.parts.pop_front().ok_or_else(Self::short)?;
            if part.len() > len {
                self.parts.push_front(part.slice(len));
                out.push(shared(part.slice_with_length(0, len)));
                len = 0;
            } else {
                len -= part.len();
                out.push(shared(part));
            }
        }
        Ok(out)
    }
}

/// `buffer` as `Bytes` over the same memory.
fn shared(buffer: Buffer) -> Bytes {
    struct Owner(Buffer);
    impl AsRef<[u8]> for Owner {
        fn as_ref(&self) -> &[u8] {
            self.0.as_slice()
        }
    }
    Bytes::from_owner(Owner(buffer))
}

/// The body's chunks: short pieces copied together, long ones shared.
#[derive(Default)]
struct Chunks {
    pending: BytesMut,
    out: Vec<Bytes>,
}

impl Chunks {
    fn copy(&mut self, bytes: &[u8]) {
        self.pending.put_slice(bytes);
    }

    fn push(&mut self, bytes: Bytes) {
        if bytes.len() < SHARE_FROM_BYTES {
            self.copy(&bytes);
            return;
        }
        if !self.pending.is_empty() {
            self.out.push(self.pending.split().freeze());
        }
        self.out.push(bytes);
    }

    fn finish(mut self) -> Vec<Bytes> {
        if !self.pending.is_empty() {
            self.out.push(self.pending.split().freeze());
        }
        self.out
    }
}

#[cfg(test)]
#[path = "frames_tests.rs"]
mod tests;
