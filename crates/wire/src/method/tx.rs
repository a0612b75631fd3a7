//! Class `tx` (id 90): standard transactions (amqp0-9-1.xml §tx).

use crate::codec::{ArgReader, ArgSize, ArgWriter, Res};

amqp_class! {
    /// tx.select (90/10).
    TxSelect = (90, 10, "tx.select") {}
    /// tx.select-ok (90/11).
    TxSelectOk = (90, 11, "tx.select-ok") {}
    /// tx.commit (90/20).
    TxCommit = (90, 20, "tx.commit") {}
    /// tx.commit-ok (90/21).
    TxCommitOk = (90, 21, "tx.commit-ok") {}
    /// tx.rollback (90/30).
    TxRollback = (90, 30, "tx.rollback") {}
    /// tx.rollback-ok (90/31).
    TxRollbackOk = (90, 31, "tx.rollback-ok") {}
}
