//! A minimal protobuf wire-format decoder for the handful of etcd messages the
//! reader needs (walpb, raftpb, snappb, etcdserverpb.Metadata). Hand-written so the
//! offline reader depends on nothing generated and can bound every length before
//! it allocates.

/// A decoding failure inside one message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PbError {
    /// The buffer ended inside a varint, a length or a fixed-width field.
    #[error("truncated protobuf at byte {at}")]
    Truncated {
        /// Offset within the message.
        at: usize,
    },
    /// A varint longer than 10 bytes.
    #[error("varint overflow at byte {at}")]
    VarintOverflow {
        /// Offset within the message.
        at: usize,
    },
    /// A wire type protobuf does not define (or a group, which etcd never writes).
    #[error("unsupported wire type {wire_type} at byte {at}")]
    WireType {
        /// The wire type found.
        wire_type: u8,
        /// Offset within the message.
        at: usize,
    },
}

/// One field's value as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

impl Value<'_> {
    /// The value as an unsigned integer, for varint and fixed fields.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Varint(v) | Value::Fixed64(v) => Some(v),
            Value::Fixed32(v) => Some(u64::from(v)),
            Value::Bytes(_) => None,
        }
    }
}

/// Iterates over `(field number, value)` pairs of one message.
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

/// Starts decoding `buf` as one message.
pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields {
        buf,
        pos: 0,
        failed: false,
    }
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, PbError> {
    let start = *pos;
    let mut v: u64 = 0;
    for i in 0..10 {
        let b = *buf.get(*pos).ok_or(PbError::Truncated { at: *pos })?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(PbError::VarintOverflow { at: start })
}

impl<'a> Fields<'a> {
    fn next_field(&mut self) -> Result<(u32, Value<'a>), PbError> {
        let at = self.pos;
        let key = varint(self.buf, &mut self.pos)?;
        let field = u32::try_from(key >> 3).unwrap_or(u32::MAX);
        let wire_type = (key & 7) as u8;
        let take = |pos: &mut usize, n: usize, buf: &'a [u8]| -> Result<&'a [u8], PbError> {
            let end = pos.checked_add(n).ok_or(PbError::Truncated { at: *pos })?;
            let s = buf.get(*pos..end).ok_or(PbError::Truncated { at: *pos })?;
            *pos = end;
            Ok(s)
        };
        let value = match wire_type {
            0 => Value::Varint(varint(self.buf, &mut self.pos)?),
            1 => {
                let s = take(&mut self.pos, 8, self.buf)?;
                Value::Fixed64(u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
            }
            2 => {
                let len = varint(self.buf, &mut self.pos)?;
                let len = usize::try_from(len).map_err(|_| PbError::Truncated { at: self.pos })?;
                Value::Bytes(take(&mut self.pos, len, self.buf)?)
            }
            5 => {
                let s = take(&mut self.pos, 4, self.buf)?;
                Value::Fixed32(u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
            }
            other => {
                return Err(PbError::WireType {
                    wire_type: other,
                    at,
                })
            }
        };
        Ok((field, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), PbError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let r = self.next_field();
        self.failed = r.is_err();
        Some(r)
    }
}

/// Decodes a packed or repeated-unpacked `uint64` field value into `out`.
pub(crate) fn push_u64s(value: Value<'_>, out: &mut Vec<u64>) -> Result<(), PbError> {
    match value {
        Value::Bytes(b) => {
            let mut pos = 0;
            while pos < b.len() {
                out.push(varint(b, &mut pos)?);
            }
            Ok(())
        }
        v => {
            out.extend(v.as_u64());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_varint_bytes_and_fixed() {
        // field 1 varint 150, field 2 bytes "hi", field 3 fixed32 7, field 4 fixed64 9
        let buf = [
            0x08, 0x96, 0x01, 0x12, 0x02, b'h', b'i', 0x1d, 7, 0, 0, 0, 0x21, 9, 0, 0, 0, 0, 0, 0,
            0,
        ];
        let got: Vec<_> = fields(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            vec![
                (1, Value::Varint(150)),
                (2, Value::Bytes(b"hi")),
                (3, Value::Fixed32(7)),
                (4, Value::Fixed64(9)),
            ]
        );
    }

    #[test]
    fn truncated_length_is_an_error_not_a_panic() {
        let buf = [0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 1];
        let r: Result<Vec<_>, _> = fields(&buf).collect();
        assert!(matches!(r, Err(PbError::Truncated { .. })));
    }

    #[test]
    fn packed_u64s() {
        let mut out = vec![];
        push_u64s(Value::Bytes(&[1, 0x96, 0x01]), &mut out).unwrap();
        push_u64s(Value::Varint(5), &mut out).unwrap();
        assert_eq!(out, vec![1, 150, 5]);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            for (_, v) in fields(&bytes).flatten() {
                let mut out = vec![];
                let _ = push_u64s(v, &mut out);
            }
        }
    }
}
