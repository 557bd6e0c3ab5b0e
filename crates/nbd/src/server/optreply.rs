//! Option replies: `NBD_REP_*` messages of the negotiation.

use crate::proto::{info, rep, OPTION_REPLY_MAGIC};

use super::Shape;

/// One option reply: magic, option, reply type, length, data.
pub(crate) fn reply(opt: u32, typ: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + data.len());
    v.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&typ.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// `NBD_REP_ACK`.
pub(crate) fn ack(opt: u32) -> Vec<u8> {
    reply(opt, rep::ACK, &[])
}

/// An error reply with a message for humans.
pub(crate) fn error(opt: u32, typ: u32, msg: &str) -> Vec<u8> {
    reply(opt, typ, msg.as_bytes())
}

/// `NBD_REP_SERVER`: the export's name (and its description, if any).
pub(crate) fn server(opt: u32, shape: &Shape) -> Vec<u8> {
    let name = shape.export.name.as_bytes();
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name);
    if let Some(desc) = &shape.export.description {
        d.extend_from_slice(desc.as_bytes());
    }
    reply(opt, rep::SERVER, &d)
}

/// `NBD_REP_META_CONTEXT`: a context id and its name.
pub(crate) fn meta_context(opt: u32, id: u32, name: &str) -> Vec<u8> {
    let mut d = id.to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    reply(opt, rep::META_CONTEXT, &d)
}

/// The `NBD_REP_INFO` replies for `NBD_OPT_INFO`/`GO`: always the export
/// (size, flags) and the block sizes, plus the name and description when
/// asked for. Then the caller sends the `ACK`.
pub(crate) fn infos(opt: u32, shape: &Shape, structured: bool, asked: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut d = info::EXPORT.to_be_bytes().to_vec();
    d.extend_from_slice(&shape.size.to_be_bytes());
    d.extend_from_slice(&shape.tflags(structured).to_be_bytes());
    out.extend(reply(opt, rep::INFO, &d));
    let mut d = info::BLOCK_SIZE.to_be_bytes().to_vec();
    d.extend_from_slice(&shape.min_block.to_be_bytes());
    d.extend_from_slice(&shape.preferred().to_be_bytes());
    d.extend_from_slice(&shape.limits.max_block.to_be_bytes());
    out.extend(reply(opt, rep::INFO, &d));
    if asked.contains(&info::NAME) {
        let mut d = info::NAME.to_be_bytes().to_vec();
        d.extend_from_slice(shape.export.name.as_bytes());
        out.extend(reply(opt, rep::INFO, &d));
    }
    if let (true, Some(desc)) = (
        asked.contains(&info::DESCRIPTION),
        &shape.export.description,
    ) {
        let mut d = info::DESCRIPTION.to_be_bytes().to_vec();
        d.extend_from_slice(desc.as_bytes());
        out.extend(reply(opt, rep::INFO, &d));
    }
    out
}
