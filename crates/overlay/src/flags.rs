//! gocryptfs feature flags (the `FeatureFlags` list in `gocryptfs.conf`).
//!
//! The names are part of the on-disk format: changing one breaks
//! compatibility with gocryptfs (pinned by the tests below).

use std::fmt;

/// One feature flag gocryptfs v2 defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FeatureFlag {
    /// File names are stored unencrypted.
    PlaintextNames,
    /// Each directory holds a random 16-byte `gocryptfs.diriv` (absent with
    /// deterministic names, where the IV is all zeros).
    DirIV,
    /// Names are EME-encrypted (mandatory since gocryptfs 1.0 unless
    /// PlaintextNames).
    EMENames,
    /// 128-bit nonces for AES-GCM and AES-SIV (mandatory for them).
    GCMIV128,
    /// Encrypted names longer than the limit are hashed (`gocryptfs.longname.*`).
    LongNames,
    /// The long-name limit is the config's `LongNameMax` instead of 255.
    LongNameMax,
    /// Content is AES-SIV (RFC 5297) instead of AES-GCM.
    AESSIV,
    /// Unpadded base64url for names.
    Raw64,
    /// Keys are derived from the master key with HKDF-SHA256.
    HKDF,
    /// The master key is wrapped with a FIDO2 token (not supported here).
    FIDO2,
    /// Content is XChaCha20-Poly1305.
    XChaCha20Poly1305,
}

impl FeatureFlag {
    /// Every flag, in gocryptfs's declaration order.
    pub const ALL: [FeatureFlag; 11] = [
        FeatureFlag::PlaintextNames,
        FeatureFlag::DirIV,
        FeatureFlag::EMENames,
        FeatureFlag::GCMIV128,
        FeatureFlag::LongNames,
        FeatureFlag::LongNameMax,
        FeatureFlag::AESSIV,
        FeatureFlag::Raw64,
        FeatureFlag::HKDF,
        FeatureFlag::FIDO2,
        FeatureFlag::XChaCha20Poly1305,
    ];

    /// The name as written in `gocryptfs.conf`.
    pub fn name(self) -> &'static str {
        match self {
            FeatureFlag::PlaintextNames => "PlaintextNames",
            FeatureFlag::DirIV => "DirIV",
            FeatureFlag::EMENames => "EMENames",
            FeatureFlag::GCMIV128 => "GCMIV128",
            FeatureFlag::LongNames => "LongNames",
            FeatureFlag::LongNameMax => "LongNameMax",
            FeatureFlag::AESSIV => "AESSIV",
            FeatureFlag::Raw64 => "Raw64",
            FeatureFlag::HKDF => "HKDF",
            FeatureFlag::FIDO2 => "FIDO2",
            FeatureFlag::XChaCha20Poly1305 => "XChaCha20Poly1305",
        }
    }

    /// Parses a flag name exactly as gocryptfs writes it (case-sensitive).
    pub fn parse(s: &str) -> Option<FeatureFlag> {
        FeatureFlag::ALL.into_iter().find(|f| f.name() == s)
    }
}

impl fmt::Display for FeatureFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changing these strings changes the on-disk format.
    #[test]
    fn names_are_pinned() {
        let names: Vec<&str> = FeatureFlag::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(
            names,
            [
                "PlaintextNames",
                "DirIV",
                "EMENames",
                "GCMIV128",
                "LongNames",
                "LongNameMax",
                "AESSIV",
                "Raw64",
                "HKDF",
                "FIDO2",
                "XChaCha20Poly1305"
            ]
        );
        for f in FeatureFlag::ALL {
            assert_eq!(FeatureFlag::parse(f.name()), Some(f));
        }
        assert_eq!(FeatureFlag::parse("hkdf"), None);
    }
}
