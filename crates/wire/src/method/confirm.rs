//! Class `confirm` (id 85, RabbitMQ extension): publisher confirms.

use crate::codec::{Arg, ArgReader, ArgSize, ArgWriter, Res};

amqp_class! {
    /// confirm.select (85/10).
    ConfirmSelect = (85, 10, "confirm.select") {
        pub nowait: bool,
    }
    /// confirm.select-ok (85/11).
    ConfirmSelectOk = (85, 11, "confirm.select-ok") {}
}
