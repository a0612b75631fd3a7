//! Class `channel` (id 20): opening, flow control and closing of channels
//! (amqp0-9-1.xml §channel).

use crate::codec::{Arg, ArgReader, ArgSize, ArgWriter, Res};
use crate::types::{LongStr, ShortStr};

amqp_class! {
    /// channel.open (20/10).
    ChannelOpen = (20, 10, "channel.open") {
        reserved out_of_band: ShortStr,
    }
    /// channel.open-ok (20/11).
    ChannelOpenOk = (20, 11, "channel.open-ok") {
        reserved channel_id: LongStr,
    }
    /// channel.flow (20/20): pause or resume content flow.
    ChannelFlow = (20, 20, "channel.flow") {
        pub active: bool,
    }
    /// channel.flow-ok (20/21).
    ChannelFlowOk = (20, 21, "channel.flow-ok") {
        pub active: bool,
    }
    /// channel.close (20/40): reply code/text and the failing method.
    ChannelClose = (20, 40, "channel.close") {
        pub reply_code: u16,
        pub reply_text: ShortStr,
        pub class_id: u16,
        pub method_id: u16,
    }
    /// channel.close-ok (20/41).
    ChannelCloseOk = (20, 41, "channel.close-ok") {}
}
