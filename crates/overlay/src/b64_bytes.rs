//! Base64 (standard alphabet, padded) for `[]byte` fields, as Go's
//! `encoding/json` writes them: `#[serde(with = "crate::b64_bytes")]`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serializer};

pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&STANDARD.encode(v))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let s = Option::<String>::deserialize(d)?.unwrap_or_default();
    STANDARD
        .decode(s.as_bytes())
        .map_err(serde::de::Error::custom)
}
