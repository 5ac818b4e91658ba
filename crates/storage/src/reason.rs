//! What a failed storage request means to the code that sent it, decided once here from the
//! service's status and error code, so that no caller matches status numbers or message text.
//!
//! The Table and Queue services answer the same condition with codes of their own
//! (`TableNotFound`, `ResourceNotFound` for an entity, `QueueNotFound`, `MessageNotFound`), and
//! an entity group transaction reports its failed operation with the same status and code as
//! the operation alone would get. Azurite sometimes leaves the code out; the status then
//! decides.

use super::throttled::is_throttling;

/// Why a request failed, as its caller acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// 404: what the request names is not there.
    NotFound(Missing),
    /// 409 on a create: the table, queue or entity exists already.
    AlreadyExists,
    /// 412: a conditional request's etag no longer matches (another writer came first).
    PreconditionFailed,
    /// The account is over its targets (503 Server Busy, 500 Operation Timed Out).
    Throttled,
    /// The credentials were not accepted: a wrong key, a bad signature, an expired token or
    /// one for another audience (401, and 403 `AuthenticationFailed`).
    Unauthenticated,
    /// The credentials were accepted and do not allow this (403 otherwise: a SAS without the
    /// permission, an identity without the data role, a firewall).
    PermissionDenied,
    /// The request itself is wrong for the service: a bad value, a property or row too large
    /// (400, 413).
    BadRequest,
    /// 409 for another reason than existing already (a table or queue being deleted).
    Conflict,
    /// Another server-side failure (500, 502, 504...).
    ServerFault,
    /// No complete answer: the service could not be reached, or the connection broke.
    Unreachable,
    /// Refused by this client before sending (a documented limit or rule would be broken).
    InvalidRequest,
    /// An answer this client cannot read.
    InvalidResponse,
    /// Any other status.
    Other,
}

/// What a [`Reason::NotFound`] says is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Table,
    Queue,
    /// An entity of a table (`ResourceNotFound`).
    Entity,
    /// A queue message (`MessageNotFound`), gone or its pop receipt stale.
    Message,
    /// A blob container (`ContainerNotFound`).
    Container,
    /// A blob (`BlobNotFound`).
    Blob,
    /// The code named nothing known, or there was none.
    Unknown,
}

impl Reason {
    /// The reason for an answer with `status` and the service's error `code`.
    pub fn of_answer(status: u16, code: Option<&str>) -> Reason {
        if is_throttling(status, code) {
            return Reason::Throttled;
        }
        match (status, code) {
            (
                _,
                Some(
                    "AuthenticationFailed"
                    | "InvalidAuthenticationInfo"
                    | "NoAuthenticationInformation",
                ),
            )
            | (401, _) => Reason::Unauthenticated,
            (403, _) => Reason::PermissionDenied,
            (404, code) => Reason::NotFound(match code {
                Some("TableNotFound") => Missing::Table,
                Some("QueueNotFound") => Missing::Queue,
                Some("ResourceNotFound" | "EntityNotFound") => Missing::Entity,
                Some("MessageNotFound") => Missing::Message,
                Some("ContainerNotFound") => Missing::Container,
                Some("BlobNotFound") => Missing::Blob,
                _ => Missing::Unknown,
            }),
            // A create's conflict, with or without its code; other codes are other conflicts.
            (409, None) => Reason::AlreadyExists,
            (409, Some(code)) if code.ends_with("AlreadyExists") => Reason::AlreadyExists,
            (409, Some(_)) => Reason::Conflict,
            (412, _) => Reason::PreconditionFailed,
            (400 | 413, _) => Reason::BadRequest,
            (500..=599, _) => Reason::ServerFault,
            _ => Reason::Other,
        }
    }

    /// Whether a conditional write lost to another writer: the row is gone, or changed since
    /// it was read.
    pub fn is_gone_or_changed(self) -> bool {
        matches!(self, Reason::NotFound(_) | Reason::PreconditionFailed)
    }

    /// Whether the account refused the credentials or what they allow.
    pub fn is_refused_credentials(self) -> bool {
        matches!(self, Reason::Unauthenticated | Reason::PermissionDenied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decide_and_the_status_stands_in_when_there_is_none() {
        let cases = [
            (404, Some("TableNotFound"), Reason::NotFound(Missing::Table)),
            (
                404,
                Some("ResourceNotFound"),
                Reason::NotFound(Missing::Entity),
            ),
            (404, Some("QueueNotFound"), Reason::NotFound(Missing::Queue)),
            (
                404,
                Some("MessageNotFound"),
                Reason::NotFound(Missing::Message),
            ),
            (404, None, Reason::NotFound(Missing::Unknown)),
            (409, Some("TableAlreadyExists"), Reason::AlreadyExists),
            (409, Some("EntityAlreadyExists"), Reason::AlreadyExists),
            (409, Some("QueueAlreadyExists"), Reason::AlreadyExists),
            (409, None, Reason::AlreadyExists),
            (409, Some("TableBeingDeleted"), Reason::Conflict),
            (
                412,
                Some("UpdateConditionNotSatisfied"),
                Reason::PreconditionFailed,
            ),
            (503, Some("ServerBusy"), Reason::Throttled),
            (503, None, Reason::Throttled),
            (500, Some("OperationTimedOut"), Reason::Throttled),
            (500, Some("InternalError"), Reason::ServerFault),
            (502, None, Reason::ServerFault),
            (401, None, Reason::Unauthenticated),
            (403, Some("AuthenticationFailed"), Reason::Unauthenticated),
            (
                400,
                Some("InvalidAuthenticationInfo"),
                Reason::Unauthenticated,
            ),
            (
                403,
                Some("AuthorizationPermissionMismatch"),
                Reason::PermissionDenied,
            ),
            (403, Some("AuthorizationFailure"), Reason::PermissionDenied),
            (400, Some("InvalidInput"), Reason::BadRequest),
            (413, Some("RequestBodyTooLarge"), Reason::BadRequest),
            (418, None, Reason::Other),
        ];
        for (status, code, reason) in cases {
            assert_eq!(Reason::of_answer(status, code), reason, "{status} {code:?}");
        }
    }

    #[test]
    fn a_lost_race_is_a_missing_or_changed_row() {
        assert!(Reason::of_answer(404, Some("ResourceNotFound")).is_gone_or_changed());
        assert!(Reason::of_answer(412, None).is_gone_or_changed());
        assert!(!Reason::of_answer(409, None).is_gone_or_changed());
    }
}
