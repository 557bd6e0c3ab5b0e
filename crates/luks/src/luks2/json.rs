//! The LUKS2 JSON metadata model (spec §3): `keyslots`, `tokens`, `segments`,
//! `digests`, `config`. Object ids are decimal strings, 64-bit numbers are
//! decimal strings, binary values are base64 (RFC 4648 with padding).
//!
//! Every object keeps fields it does not know in `extra`, tokens are kept as
//! raw JSON, and keyslots of types other than `luks2` (e.g. `reencrypt`) are
//! kept verbatim, so a parse → serialise round trip loses nothing.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{bad, Error};

/// A u64 stored as a JSON string of decimal digits (e.g. `"16777216"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct U64Str(pub u64);

impl Serialize for U64Str {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_string())
    }
}

impl<'de> Deserialize<'de> for U64Str {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_u64_str(&s)
            .map(U64Str)
            .map_err(serde::de::Error::custom)
    }
}

fn parse_u64_str(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{s}' is not a decimal number string"));
    }
    s.parse::<u64>()
        .map_err(|_| format!("'{s}' does not fit in 64 bits"))
}

/// Bytes stored as a base64 string.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct B64(pub Vec<u8>);

impl Serialize for B64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for B64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map(B64)
            .map_err(|e| serde::de::Error::custom(format!("invalid base64 '{s}': {e}")))
    }
}

/// A segment's size: bytes, or `"dynamic"` (to the end of the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentSize {
    /// Up to the end of the device.
    Dynamic,
    /// Fixed size in bytes.
    Bytes(u64),
}

impl Serialize for SegmentSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SegmentSize::Dynamic => s.serialize_str("dynamic"),
            SegmentSize::Bytes(n) => s.serialize_str(&n.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for SegmentSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "dynamic" {
            return Ok(SegmentSize::Dynamic);
        }
        parse_u64_str(&s)
            .map(SegmentSize::Bytes)
            .map_err(serde::de::Error::custom)
    }
}

/// Anti-forensic splitter parameters (`af`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Af {
    /// Always `"luks1"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Always 4000.
    pub stripes: u32,
    /// Diffusion hash, e.g. `"sha256"`.
    pub hash: String,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Where and how the key material is stored (`area`, type `raw`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Area {
    /// Always `"raw"` for luks2 keyslots.
    #[serde(rename = "type")]
    pub kind: String,
    /// Byte offset of the material from the start of the metadata device.
    pub offset: U64Str,
    /// Bytes reserved for the material.
    pub size: U64Str,
    /// dm-crypt cipher spec encrypting the material.
    pub encryption: String,
    /// Bytes of the keyslot encryption key (derived by the KDF).
    pub key_size: u32,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Passphrase KDF of a keyslot (`kdf`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Kdf {
    /// RFC 8018 PBKDF2-HMAC.
    #[serde(rename = "pbkdf2")]
    Pbkdf2 {
        /// HMAC hash name.
        hash: String,
        /// Iteration count.
        iterations: u32,
        /// 32-byte salt.
        salt: B64,
    },
    /// RFC 9106 Argon2i.
    #[serde(rename = "argon2i")]
    Argon2i {
        /// Passes.
        time: u32,
        /// Memory in KiB.
        memory: u32,
        /// Lanes.
        cpus: u32,
        /// 32-byte salt.
        salt: B64,
    },
    /// RFC 9106 Argon2id.
    #[serde(rename = "argon2id")]
    Argon2id {
        /// Passes.
        time: u32,
        /// Memory in KiB.
        memory: u32,
        /// Lanes.
        cpus: u32,
        /// 32-byte salt.
        salt: B64,
    },
}

impl Kdf {
    /// The KDF's salt.
    pub fn salt(&self) -> &[u8] {
        match self {
            Kdf::Pbkdf2 { salt, .. } | Kdf::Argon2i { salt, .. } | Kdf::Argon2id { salt, .. } => {
                &salt.0
            }
        }
    }
}

/// A keyslot of type `luks2`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Luks2Keyslot {
    /// `"luks2"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Bytes of the volume key stored in this slot.
    pub key_size: u32,
    /// AF parameters.
    pub af: Af,
    /// Material area.
    pub area: Area,
    /// Passphrase KDF.
    pub kdf: Kdf,
    /// 0 = ignore unless named, 1 = normal (absent), 2 = high.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A keyslot: `luks2`, or any other type kept verbatim (unsupported, e.g. `reencrypt`).
#[derive(Clone, Debug, PartialEq)]
pub enum Keyslot {
    /// A passphrase keyslot we can open.
    Luks2(Box<Luks2Keyslot>),
    /// Another keyslot type, preserved as-is.
    Other(Map<String, Value>),
}

impl Keyslot {
    /// The `type` string.
    pub fn kind(&self) -> &str {
        match self {
            Keyslot::Luks2(k) => &k.kind,
            Keyslot::Other(m) => m.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// `(offset, size)` of the keyslot's area, if it has one.
    pub fn area(&self) -> Option<(u64, u64)> {
        match self {
            Keyslot::Luks2(k) => Some((k.area.offset.0, k.area.size.0)),
            Keyslot::Other(m) => {
                let a = m.get("area")?.as_object()?;
                let off = parse_u64_str(a.get("offset")?.as_str()?).ok()?;
                let size = parse_u64_str(a.get("size")?.as_str()?).ok()?;
                Some((off, size))
            }
        }
    }
}

impl Serialize for Keyslot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Keyslot::Luks2(k) => k.serialize(s),
            Keyslot::Other(m) => m.serialize(s),
        }
    }
}

/// A data segment (`crypt`, or another type kept with its fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// `"crypt"` for dm-crypt segments.
    #[serde(rename = "type")]
    pub kind: String,
    /// Byte offset on the data device.
    pub offset: U64Str,
    /// Byte size or dynamic.
    pub size: SegmentSize,
    /// Added to every sector's IV (crypt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iv_tweak: Option<U64Str>,
    /// dm-crypt cipher spec (crypt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<String>,
    /// Encryption sector size, 512..4096 (crypt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sector_size: Option<u32>,
    /// dm-integrity layer of an authenticated segment (dm-crypt over
    /// dm-integrity); `None` for plain encryption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<SegmentIntegrity>,
    /// Segment flags (e.g. `backup-final` during reencryption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `segments.N.integrity`: the dm-integrity device under an authenticated
/// crypt segment, in the field order cryptsetup writes (`type`,
/// `journal_encryption`, `journal_integrity`, then `key_size` when the
/// integrity key size was given explicitly, cryptsetup 2.8 and later).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SegmentIntegrity {
    /// Tag algorithm as the kernel names it: `aead`, `poly1305`,
    /// `hmac(sha256)`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// dm-integrity journal encryption; cryptsetup writes and activates only `"none"`.
    pub journal_encryption: String,
    /// dm-integrity journal MAC; cryptsetup writes and activates only `"none"`.
    pub journal_integrity: String,
    /// Bytes of the integrity (MAC) key at the end of the volume key, when
    /// not the tag algorithm's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_size: Option<u32>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SegmentIntegrity {
    /// Parse the object at `path` (e.g. `segments.0.integrity`) with the
    /// checks of cryptsetup `hdr_validate_crypt_segment`: an object whose
    /// `type`, `journal_encryption` and `journal_integrity` are strings;
    /// an optional `key_size` must be a 32-bit unsigned integer. Errors name
    /// the field.
    pub fn from_value(v: Value, path: &str) -> Result<SegmentIntegrity, Error> {
        let Value::Object(mut m) = v else {
            return Err(bad(format!("JSON metadata: {path} is not an object")));
        };
        let mut text = |name: &str| match m.remove(name) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(bad(format!("JSON metadata: {path}.{name} is not a string"))),
            None => Err(bad(format!("JSON metadata: {path}.{name} is missing"))),
        };
        let kind = text("type")?;
        let journal_encryption = text("journal_encryption")?;
        let journal_integrity = text("journal_integrity")?;
        let key_size =
            match m.remove("key_size") {
                None => None,
                Some(k) => Some(k.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(
                    || {
                        bad(format!(
                            "JSON metadata: {path}.key_size {k} is not a 32-bit unsigned integer"
                        ))
                    },
                )?),
            };
        Ok(SegmentIntegrity {
            kind,
            journal_encryption,
            journal_integrity,
            key_size,
            extra: m,
        })
    }
}

impl<'de> Deserialize<'de> for SegmentIntegrity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        SegmentIntegrity::from_value(v, "integrity").map_err(serde::de::Error::custom)
    }
}

/// A volume-key digest (type `pbkdf2`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Digest {
    /// `"pbkdf2"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Keyslot ids whose key this digest verifies.
    pub keyslots: Vec<String>,
    /// Segment ids using that key.
    pub segments: Vec<String>,
    /// PBKDF2 hash.
    pub hash: String,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// 32-byte salt.
    pub salt: B64,
    /// The digest (hash length, or 20 bytes).
    pub digest: B64,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `config.requirements`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Requirements {
    /// Features an implementation must support to use the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mandatory: Option<Vec<String>>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `config`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Size of the JSON area (hdr_size − 4096).
    pub json_size: U64Str,
    /// Size of the binary keyslots area after the two metadata copies.
    pub keyslots_size: U64Str,
    /// Persistent activation flags (allow-discards, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
    /// Requirements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<Requirements>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The whole JSON metadata object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metadata {
    /// Keyslots by id.
    pub keyslots: BTreeMap<u32, Keyslot>,
    /// Tokens by id, kept verbatim.
    pub tokens: Map<String, Value>,
    /// Segments by id.
    pub segments: BTreeMap<u32, Segment>,
    /// Digests by id.
    pub digests: BTreeMap<u32, Digest>,
    /// Config.
    pub config: Config,
    /// Unknown top-level members, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn section(top: &mut Map<String, Value>, name: &str) -> Result<Map<String, Value>, Error> {
    match top.remove(name) {
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(bad(format!("JSON metadata: '{name}' is not an object"))),
        None => Err(bad(format!("JSON metadata: missing '{name}' section"))),
    }
}

fn id(section: &str, k: &str) -> Result<u32, Error> {
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) || (k.len() > 1 && k.starts_with('0'))
    {
        return Err(bad(format!(
            "JSON metadata: {section} id '{k}' is not a decimal number"
        )));
    }
    k.parse::<u32>()
        .map_err(|_| bad(format!("JSON metadata: {section} id '{k}' is too large")))
}

fn typed<T: for<'de> Deserialize<'de>>(v: Value, path: &str) -> Result<T, Error> {
    serde_json::from_value(v).map_err(|e| bad(format!("JSON metadata: {path}: {e}")))
}

impl Metadata {
    /// Build the model from parsed JSON; errors name the object (e.g. `keyslots.1`).
    pub fn from_value(v: Value) -> Result<Metadata, Error> {
        let Value::Object(mut top) = v else {
            return Err(bad("JSON metadata: top level is not an object"));
        };
        let mut keyslots = BTreeMap::new();
        for (k, v) in section(&mut top, "keyslots")? {
            let n = id("keyslot", &k)?;
            let path = format!("keyslots.{k}");
            let Value::Object(m) = v else {
                return Err(bad(format!("JSON metadata: {path} is not an object")));
            };
            let ks = match m.get("type").and_then(Value::as_str) {
                Some("luks2") => Keyslot::Luks2(Box::new(typed(Value::Object(m), &path)?)),
                Some(_) => Keyslot::Other(m),
                None => return Err(bad(format!("JSON metadata: {path}: missing 'type'"))),
            };
            keyslots.insert(n, ks);
        }
        let tokens = section(&mut top, "tokens")?;
        for (k, v) in &tokens {
            id("token", k)?;
            let ok = v.get("type").is_some_and(Value::is_string)
                && v.get("keyslots").is_some_and(Value::is_array);
            if !ok {
                return Err(bad(format!(
                    "JSON metadata: tokens.{k} needs a string 'type' and a 'keyslots' array"
                )));
            }
        }
        let mut segments = BTreeMap::new();
        for (k, v) in section(&mut top, "segments")? {
            let n = id("segment", &k)?;
            let path = format!("segments.{k}");
            let Value::Object(mut m) = v else {
                return Err(bad(format!("JSON metadata: {path} is not an object")));
            };
            // Parsed apart so that its errors name the exact field.
            let integrity = m
                .remove("integrity")
                .map(|i| SegmentIntegrity::from_value(i, &format!("{path}.integrity")))
                .transpose()?;
            let mut seg: Segment = typed(Value::Object(m), &path)?;
            seg.integrity = integrity;
            segments.insert(n, seg);
        }
        let mut digests = BTreeMap::new();
        for (k, v) in section(&mut top, "digests")? {
            let n = id("digest", &k)?;
            digests.insert(n, typed(v, &format!("digests.{k}"))?);
        }
        let config = typed(Value::Object(section(&mut top, "config")?), "config")?;
        Ok(Metadata {
            keyslots,
            tokens,
            segments,
            digests,
            config,
            extra: top,
        })
    }

    /// Parse JSON text.
    pub fn parse(text: &[u8]) -> Result<Metadata, Error> {
        let v: Value = serde_json::from_slice(text)
            .map_err(|e| bad(format!("JSON metadata does not parse: {e}")))?;
        Metadata::from_value(v)
    }

    /// Compact JSON text, as cryptsetup writes it (no whitespace).
    pub fn to_json(&self) -> Result<Vec<u8>, Error> {
        serde_json::to_vec(self).map_err(|e| bad(format!("cannot serialise JSON metadata: {e}")))
    }

    /// As a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRYPTSETUP_JSON: &str = r#"{"keyslots":{"0":{"type":"luks2","key_size":64,"af":{"type":"luks1","stripes":4000,"hash":"sha256"},"area":{"type":"raw","offset":"32768","size":"258048","encryption":"aes-xts-plain64","key_size":64},"kdf":{"type":"argon2id","time":4,"memory":32,"cpus":2,"salt":"uuBXm6q5t+Eyt4m+MPEqFTHA1+YmDk4w3DQppBLXuSM="}}},"tokens":{},"segments":{"0":{"type":"crypt","offset":"16777216","size":"dynamic","iv_tweak":"0","encryption":"aes-xts-plain64","sector_size":4096}},"digests":{"0":{"type":"pbkdf2","keyslots":["0"],"segments":["0"],"hash":"sha256","iterations":1000,"salt":"fNV5HkEsCCFeEG8ejI5nHYqnYKZEblU/qgbZk8DK/jo=","digest":"96mS57bwzoudmiE2lcP8D1TDYXgTcVDBoexcVDokJeU="}},"config":{"json_size":"12288","keyslots_size":"16744448"}}"#;

    #[test]
    fn cryptsetup_json_round_trips_byte_for_byte() {
        let m = Metadata::parse(CRYPTSETUP_JSON.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(m.to_json().unwrap()).unwrap(),
            CRYPTSETUP_JSON
        );
    }

    #[test]
    fn unknown_fields_and_tokens_are_kept() {
        let text = CRYPTSETUP_JSON
            .replace(r#""tokens":{}"#, r#""tokens":{"0":{"type":"systemd-tpm2","keyslots":["0"],"tpm2-pcrs":[7],"x":{"y":1}}}"#)
            .replace(r#""keyslots_size":"16744448"}"#, r#""keyslots_size":"16744448","flags":["allow-discards"],"future":true}"#)
            .replace(r#""sector_size":4096}"#, r#""sector_size":4096,"fancy":"yes"}"#);
        let m = Metadata::parse(text.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(m.to_json().unwrap()).unwrap(), text);
    }

    /// The segment of `cryptsetup luksFormat --integrity hmac-sha256`, in the
    /// field order of cryptsetup `json_segment_create_crypt`.
    const AUTH_SEGMENT: &str = r#""segments":{"0":{"type":"crypt","offset":"16777216","size":"dynamic","iv_tweak":"0","encryption":"aes-xts-plain64","sector_size":4096,"integrity":{"type":"hmac(sha256)","journal_encryption":"none","journal_integrity":"none"}}}"#;

    fn with_segment(seg: &str) -> String {
        let start = CRYPTSETUP_JSON.find(r#""segments":"#).unwrap();
        let end = CRYPTSETUP_JSON.find(r#","digests":"#).unwrap();
        format!(
            "{}{seg}{}",
            &CRYPTSETUP_JSON[..start],
            &CRYPTSETUP_JSON[end..]
        )
    }

    #[test]
    fn integrity_segment_round_trips_byte_for_byte() {
        for seg in [
            AUTH_SEGMENT.to_string(),
            AUTH_SEGMENT
                .replace("aes-xts-plain64", "aegis128-random")
                .replace("hmac(sha256)", "aead"),
            // cryptsetup 2.8 adds key_size after an explicit --integrity-key-size.
            AUTH_SEGMENT.replace(r#""none"}"#, r#""none","key_size":32}"#),
            // Unknown fields inside the object are kept in place.
            AUTH_SEGMENT.replace(r#""none"}"#, r#""none","future":[1,"x"]}"#),
        ] {
            let text = with_segment(&seg);
            let m = Metadata::parse(text.as_bytes()).unwrap();
            assert!(m.segments[&0].integrity.is_some());
            assert_eq!(String::from_utf8(m.to_json().unwrap()).unwrap(), text);
        }
        let m = Metadata::parse(with_segment(AUTH_SEGMENT).as_bytes()).unwrap();
        let i = m.segments[&0].integrity.clone().unwrap();
        assert_eq!(
            (
                i.kind.as_str(),
                i.journal_encryption.as_str(),
                i.journal_integrity.as_str(),
                i.key_size
            ),
            ("hmac(sha256)", "none", "none", None)
        );
    }

    #[test]
    fn integrity_errors_name_the_field() {
        for (from, to, expect) in [
            (
                r#""type":"hmac(sha256)","#,
                "",
                "segments.0.integrity.type is missing",
            ),
            (
                r#""type":"hmac(sha256)""#,
                r#""type":7"#,
                "segments.0.integrity.type is not a string",
            ),
            (
                r#","journal_integrity":"none""#,
                "",
                "segments.0.integrity.journal_integrity is missing",
            ),
            (
                r#""journal_encryption":"none""#,
                r#""journal_encryption":false"#,
                "segments.0.integrity.journal_encryption is not a string",
            ),
            (
                r#""none"}"#,
                r#""none","key_size":-1}"#,
                "segments.0.integrity.key_size -1",
            ),
            (
                r#""none"}"#,
                r#""none","key_size":4294967296}"#,
                "segments.0.integrity.key_size 4294967296",
            ),
        ] {
            let seg = AUTH_SEGMENT.replace(from, to);
            assert_ne!(seg, AUTH_SEGMENT, "{from}");
            let e = Metadata::parse(with_segment(&seg).as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.contains(expect), "expected '{expect}' in: {e}");
        }
        let seg = AUTH_SEGMENT.replace(
            r#"{"type":"hmac(sha256)","journal_encryption":"none","journal_integrity":"none"}"#,
            r#"["hmac(sha256)"]"#,
        );
        let e = Metadata::parse(with_segment(&seg).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("segments.0.integrity is not an object"), "{e}");
    }

    #[test]
    fn numbers_are_strict() {
        let text = CRYPTSETUP_JSON.replace(
            r#""offset":"16777216""#,
            r#""offset":"18446744073709551616""#,
        );
        let e = Metadata::parse(text.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("segments.0") && e.contains("64 bits"), "{e}");
        let text = CRYPTSETUP_JSON.replace(r#""offset":"32768""#, r#""offset":"-1""#);
        let e = Metadata::parse(text.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("keyslots.0"), "{e}");
    }
}
