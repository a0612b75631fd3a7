//! AMQP 0-9-1 methods (§4.2.4 method frames, the class/method reference in
//! amqp0-9-1.xml plus RabbitMQ's extensions: exchange.bind/unbind,
//! basic.nack, confirm.*, connection.blocked/unblocked/update-secret).
//!
//! Each class file declares its methods in one `amqp_class!` table: struct
//! name, (class-id, method-id, RabbitMQ name[, content]) and the arguments in
//! wire order. Arguments marked `reserved` (ticket, capabilities, insist,
//! known-hosts, out-of-band, channel-id, cluster-id) are not stored: they are
//! written as zero/empty/false and skipped on decode. Consecutive `bit`
//! arguments pack into one octet, least significant bit first (§4.2.5.2).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{ArgReader, ArgSize, ArgWriter, Malformed, Res};
use crate::error::DecodeError;

/// Builds a method struct from its argument list, dropping `reserved` ones.
macro_rules! method_struct {
    ($(#[$doc:meta])* $name:ident [$($out:tt)*]) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Default)]
        pub struct $name { $($out)* }
    };
    ($(#[$doc:meta])* $name:ident [$($out:tt)*] reserved $f:ident : $t:ty, $($rest:tt)*) => {
        method_struct!($(#[$doc])* $name [$($out)*] $($rest)*);
    };
    ($(#[$doc:meta])* $name:ident [$($out:tt)*] pub $f:ident : $t:ty, $($rest:tt)*) => {
        method_struct!($(#[$doc])* $name [$($out)* #[allow(missing_docs)] pub $f: $t,] $($rest)*);
    };
}

/// Decodes, encodes or sizes one argument; `reserved` ones use the default.
macro_rules! method_arg {
    (@get pub $m:ident $f:ident $t:ty, $r:ident) => {
        $m.$f = <$t as Arg>::get($r)?;
    };
    (@get reserved $m:ident $f:ident $t:ty, $r:ident) => {
        let _: $t = <$t as Arg>::get($r)?;
    };
    (@put pub $m:ident $f:ident $t:ty, $w:ident) => {
        Arg::put(&$m.$f, $w);
    };
    (@put reserved $m:ident $f:ident $t:ty, $w:ident) => {
        Arg::put(&<$t>::default(), $w);
    };
    (@size pub $m:ident $f:ident $t:ty, $s:ident) => {
        Arg::size(&$m.$f, $s);
    };
    (@size reserved $m:ident $f:ident $t:ty, $s:ident) => {
        Arg::size(&<$t>::default(), $s);
    };
}

/// `content` marks methods followed by a content header and body.
macro_rules! has_content {
    () => {
        false
    };
    (content) => {
        true
    };
}

/// One table per class: `Name = (class-id, method-id, "name"[, content]) { args }`.
macro_rules! amqp_class {
    ($(
        $(#[$doc:meta])*
        $name:ident = ($class:literal, $method:literal, $mname:literal $(, $content:ident)?) {
            $($vis:tt $field:ident : $ty:ty),* $(,)?
        }
    )*) => {$(
        method_struct!($(#[$doc])* $name [] $($vis $field : $ty,)*);

        impl $name {
            /// Class id on the wire.
            pub const CLASS_ID: u16 = $class;
            /// Method id on the wire.
            pub const METHOD_ID: u16 = $method;
            /// RabbitMQ's name, e.g. "queue.declare-ok".
            pub const NAME: &'static str = $mname;
            /// True if a content header and body follow this method.
            pub const HAS_CONTENT: bool = has_content!($($content)?);

            #[allow(unused_mut, unused_variables, clippy::field_reassign_with_default)]
            pub(crate) fn decode_args(r: &mut ArgReader) -> Res<Self> {
                let mut m = Self::default();
                r.utf8_required = !Self::HAS_CONTENT;
                $(method_arg!(@get $vis m $field $ty, r);)*
                Ok(m)
            }

            #[allow(unused_variables)]
            pub(crate) fn encode_args(&self, w: &mut ArgWriter<'_>) {
                let m = self;
                $(method_arg!(@put $vis m $field $ty, w);)*
            }

            #[allow(unused_variables)]
            pub(crate) fn args_size(&self, s: &mut ArgSize) {
                let m = self;
                $(method_arg!(@size $vis m $field $ty, s);)*
            }
        }
    )*};
}

mod basic;
mod channel;
mod confirm;
mod connection;
mod exchange;
mod queue;
mod tx;

pub use basic::*;
pub use channel::*;
pub use confirm::*;
pub use connection::*;
pub use exchange::*;
pub use queue::*;
pub use tx::*;

/// Generates the [`Method`] enum and its dispatch from the list of structs: those `inline` are
/// held in the enum, those `boxed` behind a pointer.
macro_rules! method_enum {
    (inline: [$($name:ident),* $(,)?], boxed: [$($boxed:ident),* $(,)?] $(,)?) => {
        /// Any AMQP 0-9-1 method; the variant name is the struct name.
        ///
        /// The rare large methods are boxed (exchange.declare, the binds, basic.consume, the
        /// handshake's start and start-ok, and basic.deliver and basic.return, which the broker
        /// encodes without a `Method`): every publish moves a `Frame` and a `Command` that hold
        /// a `Method`, which would otherwise be the size of the largest. The largest left inline
        /// are basic.get-ok's arguments (80 bytes) and basic.publish's (72).
        #[derive(Clone, Debug, PartialEq)]
        pub enum Method {
            $(
                #[allow(missing_docs)]
                $name($name),
            )*
            $(
                #[allow(missing_docs)]
                $boxed(Box<$boxed>),
            )*
        }

        $(
            impl From<$name> for Method {
                fn from(m: $name) -> Method {
                    Method::$name(m)
                }
            }
        )*
        $(
            impl From<$boxed> for Method {
                fn from(m: $boxed) -> Method {
                    Method::$boxed(Box::new(m))
                }
            }
        )*

        impl Method {
            /// Class id on the wire.
            pub fn class_id(&self) -> u16 {
                match self {
                    $(Method::$name(_) => $name::CLASS_ID,)*
                    $(Method::$boxed(_) => $boxed::CLASS_ID,)*
                }
            }

            /// Method id on the wire.
            pub fn method_id(&self) -> u16 {
                match self {
                    $(Method::$name(_) => $name::METHOD_ID,)*
                    $(Method::$boxed(_) => $boxed::METHOD_ID,)*
                }
            }

            /// RabbitMQ's name, e.g. "basic.publish" or "queue.declare-ok".
            pub fn name(&self) -> &'static str {
                match self {
                    $(Method::$name(_) => $name::NAME,)*
                    $(Method::$boxed(_) => $boxed::NAME,)*
                }
            }

            /// True for basic.publish, basic.return, basic.deliver and
            /// basic.get-ok: a content header and body follow (§4.2.6).
            pub fn has_content(&self) -> bool {
                match self {
                    $(Method::$name(_) => $name::HAS_CONTENT,)*
                    $(Method::$boxed(_) => $boxed::HAS_CONTENT,)*
                }
            }

            fn encode_args(&self, w: &mut ArgWriter<'_>) {
                match self {
                    $(Method::$name(m) => m.encode_args(w),)*
                    $(Method::$boxed(m) => m.encode_args(w),)*
                }
            }

            fn args_size(&self, s: &mut ArgSize) {
                match self {
                    $(Method::$name(m) => m.args_size(s),)*
                    $(Method::$boxed(m) => m.args_size(s),)*
                }
            }

            /// `None` if the ids are unknown.
            fn decode_args(class_id: u16, method_id: u16, r: &mut ArgReader) -> Option<Res<Method>> {
                match (class_id, method_id) {
                    $(($name::CLASS_ID, $name::METHOD_ID) => Some($name::decode_args(r).map(Method::from)),)*
                    $(($boxed::CLASS_ID, $boxed::METHOD_ID) => Some($boxed::decode_args(r).map(Method::from)),)*
                    _ => None,
                }
            }
        }

        /// RabbitMQ's name of a method ("basic.publish"), if the ids are known.
        pub fn method_name(class_id: u16, method_id: u16) -> Option<&'static str> {
            match (class_id, method_id) {
                $(($name::CLASS_ID, $name::METHOD_ID) => Some($name::NAME),)*
                $(($boxed::CLASS_ID, $boxed::METHOD_ID) => Some($boxed::NAME),)*
                _ => None,
            }
        }
    };
}

method_enum! {
    inline: [
        ConnectionSecure, ConnectionSecureOk,
        ConnectionTune, ConnectionTuneOk, ConnectionOpen, ConnectionOpenOk,
        ConnectionClose, ConnectionCloseOk, ConnectionBlocked, ConnectionUnblocked,
        ConnectionUpdateSecret, ConnectionUpdateSecretOk,
        ChannelOpen, ChannelOpenOk, ChannelFlow, ChannelFlowOk, ChannelClose, ChannelCloseOk,
        ExchangeDeclareOk, ExchangeDelete, ExchangeDeleteOk, ExchangeBindOk, ExchangeUnbindOk,
        QueueDeclare, QueueDeclareOk, QueueBindOk, QueuePurge, QueuePurgeOk,
        QueueDelete, QueueDeleteOk, QueueUnbindOk,
        BasicQos, BasicQosOk, BasicConsumeOk, BasicCancel, BasicCancelOk,
        BasicPublish, BasicGet, BasicGetOk, BasicGetEmpty,
        BasicAck, BasicReject, BasicRecoverAsync, BasicRecover, BasicRecoverOk, BasicNack,
        TxSelect, TxSelectOk, TxCommit, TxCommitOk, TxRollback, TxRollbackOk,
        ConfirmSelect, ConfirmSelectOk,
    ],
    boxed: [
        ConnectionStart, ConnectionStartOk, ExchangeDeclare, ExchangeBind, ExchangeUnbind,
        QueueBind, QueueUnbind, BasicConsume, BasicReturn, BasicDeliver,
    ],
}

impl Method {
    /// Appends class id, method id and the arguments (§4.2.4) — the method
    /// frame's payload, without the frame envelope.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        out.put_u16(self.class_id());
        out.put_u16(self.method_id());
        self.encode_args(&mut ArgWriter::new(out));
    }

    /// Size of [`Method::encode`]'s output.
    pub fn encoded_len(&self) -> usize {
        let mut s = ArgSize::new();
        self.args_size(&mut s);
        4 + s.len
    }

    /// Decodes a method frame's payload. Fewer than 4 octets is a frame
    /// error, unknown ids are [`DecodeError::UnknownMethod`], malformed,
    /// missing or trailing argument octets are [`DecodeError::Syntax`], and a
    /// short string that is not UTF-8 in a method without content is
    /// [`DecodeError::MalformedUtf8`].
    pub fn decode(mut payload: Bytes) -> Result<Method, DecodeError> {
        if payload.len() < 4 {
            return Err(DecodeError::Frame(format!(
                "method frame payload of {} octets has no class and method id",
                payload.len()
            )));
        }
        let class_id = payload.get_u16();
        let method_id = payload.get_u16();
        let syntax = |detail| DecodeError::Syntax { class_id, method_id, detail };
        let mut r = ArgReader::new(payload);
        match Method::decode_args(class_id, method_id, &mut r) {
            None => Err(DecodeError::UnknownMethod { class_id, method_id }),
            Some(Err(Malformed(detail))) => Err(syntax(detail)),
            Some(Ok(_)) if !r.buf.is_empty() => {
                Err(syntax(format!("{} unexpected trailing octets", r.buf.len())))
            }
            Some(Ok(_)) if r.malformed_utf8 => Err(DecodeError::MalformedUtf8 { class_id, method_id }),
            Some(Ok(method)) => Ok(method),
        }
    }
}

#[cfg(test)]
mod tests;
