//! Parsing of option payloads (`NBD_OPT_INFO`/`GO`, `NBD_OPT_*_META_CONTEXT`).
//! Every length inside a payload is checked against what is left of it.

use crate::proto::{alloc, MAX_STRING};

/// A payload that does not parse (the reply is `NBD_REP_ERR_INVALID`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

/// A cursor over an option payload.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, Malformed> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, Malformed> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A string with a 32-bit length, at most [`MAX_STRING`] bytes.
    fn string(&mut self, what: &'static str) -> Result<&'a [u8], Malformed> {
        let n = self.u32(what)? as usize;
        if n > MAX_STRING {
            return Err(Malformed("string longer than 4096 bytes"));
        }
        self.take(n, what)
    }
    fn end(&self) -> Result<(), Malformed> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Malformed("trailing bytes after the payload"))
        }
    }
}

/// `NBD_OPT_INFO` / `NBD_OPT_GO`: an export name and the information
/// types asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct InfoRequest<'a> {
    /// The export name.
    pub(crate) name: &'a [u8],
    /// `NBD_INFO_*` types requested.
    pub(crate) infos: Vec<u16>,
}

/// Parses an `NBD_OPT_INFO`/`GO` payload.
pub(crate) fn parse_info(data: &[u8]) -> Result<InfoRequest<'_>, Malformed> {
    let mut c = Cursor(data);
    let name = c.string("export name")?;
    let n = c.u16("number of information requests")? as usize;
    if c.0.len() != n * 2 {
        return Err(Malformed(
            "information request count does not match the length",
        ));
    }
    let infos = (0..n)
        .map(|_| c.u16("information request"))
        .collect::<Result<Vec<u16>, Malformed>>()?;
    c.end()?;
    Ok(InfoRequest { name, infos })
}

/// `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`: an export
/// name and the queries.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MetaRequest<'a> {
    /// The export name.
    pub(crate) name: &'a [u8],
    /// The queries (context names or, for a list, namespace prefixes).
    pub(crate) queries: Vec<&'a [u8]>,
}

/// Parses a metadata-context option payload.
pub(crate) fn parse_meta(data: &[u8]) -> Result<MetaRequest<'_>, Malformed> {
    let mut c = Cursor(data);
    let name = c.string("export name")?;
    let n = c.u32("number of queries")? as usize;
    // Each query takes at least its 4-byte length: bound the count first.
    if n > c.0.len() / 4 {
        return Err(Malformed("more queries than the payload holds"));
    }
    let mut queries = Vec::with_capacity(n);
    for _ in 0..n {
        queries.push(c.string("query")?);
    }
    c.end()?;
    Ok(MetaRequest { name, queries })
}

/// Whether the queries select `base:allocation`, the one context served.
/// A list with no query lists every context, and `base:` (in a list) is
/// every context of the `base` namespace; a set with no query selects none.
pub(crate) fn selects_alloc(queries: &[&[u8]], list: bool) -> bool {
    if list && queries.is_empty() {
        return true;
    }
    queries
        .iter()
        .any(|q| *q == alloc::CONTEXT.as_bytes() || (list && *q == b"base:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info_payload(name: &[u8], infos: &[u16]) -> Vec<u8> {
        let mut v = (name.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(name);
        v.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            v.extend_from_slice(&i.to_be_bytes());
        }
        v
    }

    #[test]
    fn info_parses() {
        let p = info_payload(b"vol", &[3, 1]);
        let r = parse_info(&p).unwrap();
        assert_eq!(r.name, b"vol");
        assert_eq!(r.infos, vec![3, 1]);
    }

    #[test]
    fn info_rejects_malformed() {
        assert!(parse_info(&[]).is_err());
        // Name length beyond the payload.
        assert!(parse_info(&[0, 0, 0, 9, b'a', 0, 0]).is_err());
        // Name length beyond 4096.
        assert!(parse_info(&[0, 1, 0, 1]).is_err());
        // A count that does not match.
        let mut p = info_payload(b"", &[3]);
        p[5] = 7;
        assert!(parse_info(&p).is_err());
        let mut p = info_payload(b"", &[3]);
        p.push(0);
        assert!(parse_info(&p).is_err());
        // A huge count with no data.
        assert!(parse_info(&[0, 0, 0, 0, 0xff, 0xff]).is_err());
    }

    fn meta_payload(name: &[u8], qs: &[&[u8]]) -> Vec<u8> {
        let mut v = (name.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(name);
        v.extend_from_slice(&(qs.len() as u32).to_be_bytes());
        for q in qs {
            v.extend_from_slice(&(q.len() as u32).to_be_bytes());
            v.extend_from_slice(q);
        }
        v
    }

    #[test]
    fn meta_parses_and_selects() {
        let p = meta_payload(b"", &[b"base:allocation", b"qemu:dirty-bitmap:x"]);
        let r = parse_meta(&p).unwrap();
        assert_eq!(r.queries.len(), 2);
        assert!(selects_alloc(&r.queries, false));
        assert!(selects_alloc(&[b"base:"], true));
        assert!(!selects_alloc(&[b"base:"], false));
        assert!(selects_alloc(&[], true));
        assert!(!selects_alloc(&[], false));
        assert!(!selects_alloc(&[b"qemu:x"], true));
    }

    #[test]
    fn meta_rejects_malformed() {
        // 4 billion queries in 4 bytes: refused before any allocation.
        assert!(parse_meta(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]).is_err());
        let mut p = meta_payload(b"x", &[b"base:allocation"]);
        p.truncate(p.len() - 1);
        assert!(parse_meta(&p).is_err());
        let mut p = meta_payload(b"x", &[b"base:allocation"]);
        p.push(1);
        assert!(parse_meta(&p).is_err());
    }
}
