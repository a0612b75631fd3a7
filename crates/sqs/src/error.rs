//! SQS's errors, as AWS's API reference names them: the JSON protocol's `__type`, the Query
//! protocol's code (sent as `x-amzn-query-error`, which SDKs read to raise the error they know),
//! whose fault it is, and the HTTP status.

use axum::http::StatusCode;

use crate::sigv4::SignatureError;

/// An SQS error answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SqsError {
    #[error("The specified queue does not exist.")]
    QueueDoesNotExist,
    #[error("{0}")]
    QueueNameExists(String),
    #[error("{0}")]
    InvalidParameterValue(String),
    #[error("The request must contain the parameter {0}.")]
    MissingParameter(&'static str),
    #[error("Unknown Attribute {0}.")]
    InvalidAttributeName(String),
    #[error("{0}")]
    InvalidAttributeValue(String),
    #[error("The input receipt handle \"{0}\" is not a valid receipt handle.")]
    ReceiptHandleIsInvalid(String),
    #[error("{0}")]
    InvalidMessageContents(String),
    /// A batch without entries; the operation's entry type is named (AWS's text).
    #[error("There should be at least one {0} in the request.")]
    EmptyBatchRequest(&'static str),
    #[error("Maximum number of entries per request are 10. You have sent {0}.")]
    TooManyEntriesInBatchRequest(usize),
    #[error("Id {0} repeated.")]
    BatchEntryIdsNotDistinct(String),
    #[error("A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")]
    InvalidBatchEntryId,
    #[error("Batch requests cannot be longer than 1048576 bytes. You have sent {0} bytes.")]
    BatchRequestTooLong(usize),
    #[error("{0}")]
    UnsupportedOperation(String),
    #[error("{0}")]
    ResourceNotFound(String),
    /// A limit is reached: the queue is full (`x-overflow` `reject-publish`), or the vhost holds
    /// its `max-queues` (AWS's code for "the specified action violates a limit").
    #[error("{0}")]
    OverLimit(String),
    #[error("Access to the resource {0} is denied.")]
    AccessDenied(String),
    /// Too many long polls of one key or address wait at once (`long_polls.rs`): SDKs retry this
    /// code with back-off.
    #[error("{0}")]
    RequestThrottled(String),
    #[error("{0}")]
    InvalidSignature(SignatureError),
    #[error("The action or operation requested is invalid. Verify that the action is typed correctly.")]
    InvalidAction,
    #[error("The request body is not valid JSON: {0}")]
    SerializationException(String),
    /// A Query protocol request's parameters do not read.
    #[error("The query string is malformed: {0}")]
    MalformedQueryString(String),
    #[error("{0}")]
    Internal(String),
    /// The broker task is gone (shutting down).
    #[error("The service is unavailable.")]
    ServiceUnavailable,
    /// A memory or disk alarm is in effect (`reason`: RabbitMQ's "low on disk"): sends are
    /// refused until it clears, as AMQP publishers are blocked. SDKs retry a 503.
    #[error("The service is unavailable: the broker is {0}; sends are refused until the alarm clears.")]
    ResourceAlarm(String),
}

impl SqsError {
    /// The JSON protocol's `__type` name (without its namespace).
    pub fn type_name(&self) -> &'static str {
        match self {
            SqsError::QueueDoesNotExist => "QueueDoesNotExist",
            SqsError::QueueNameExists(_) => "QueueNameExists",
            SqsError::InvalidParameterValue(_) => "InvalidParameterValueException",
            SqsError::MissingParameter(_) => "MissingRequiredParameterException",
            SqsError::InvalidAttributeName(_) => "InvalidAttributeName",
            SqsError::InvalidAttributeValue(_) => "InvalidAttributeValue",
            SqsError::ReceiptHandleIsInvalid(_) => "ReceiptHandleIsInvalid",
            SqsError::InvalidMessageContents(_) => "InvalidMessageContents",
            SqsError::EmptyBatchRequest(_) => "EmptyBatchRequest",
            SqsError::TooManyEntriesInBatchRequest(_) => "TooManyEntriesInBatchRequest",
            SqsError::BatchEntryIdsNotDistinct(_) => "BatchEntryIdsNotDistinct",
            SqsError::InvalidBatchEntryId => "InvalidBatchEntryId",
            SqsError::BatchRequestTooLong(_) => "BatchRequestTooLong",
            SqsError::UnsupportedOperation(_) => "UnsupportedOperation",
            SqsError::ResourceNotFound(_) => "ResourceNotFoundException",
            SqsError::OverLimit(_) => "OverLimit",
            SqsError::RequestThrottled(_) => "RequestThrottled",
            SqsError::AccessDenied(_) => "AccessDeniedException",
            SqsError::InvalidSignature(SignatureError::UnknownAccessKey) => "InvalidClientTokenId",
            SqsError::InvalidSignature(SignatureError::Missing) => "MissingAuthenticationTokenException",
            SqsError::InvalidSignature(SignatureError::Malformed(_)) => "IncompleteSignatureException",
            SqsError::InvalidSignature(_) => "SignatureDoesNotMatch",
            SqsError::InvalidAction => "UnknownOperationException",
            SqsError::SerializationException(_) => "SerializationException",
            SqsError::MalformedQueryString(_) => "MalformedQueryString",
            SqsError::Internal(_) => "InternalFailure",
            SqsError::ServiceUnavailable | SqsError::ResourceAlarm(_) => "ServiceUnavailable",
        }
    }

    /// The Query protocol's code and fault, as `x-amzn-query-error` carries them.
    pub fn query_error(&self) -> String {
        format!("{};{}", self.query_code(), self.fault())
    }

    /// The Query protocol's code (what SDKs speaking it match their exceptions on).
    pub fn query_code(&self) -> &'static str {
        match self {
            SqsError::QueueDoesNotExist => "AWS.SimpleQueueService.NonExistentQueue",
            SqsError::QueueNameExists(_) => "QueueAlreadyExists",
            SqsError::InvalidParameterValue(_) => "InvalidParameterValue",
            SqsError::MissingParameter(_) => "MissingParameter",
            SqsError::EmptyBatchRequest(_) => "AWS.SimpleQueueService.EmptyBatchRequest",
            SqsError::TooManyEntriesInBatchRequest(_) => {
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
            }
            SqsError::BatchEntryIdsNotDistinct(_) => "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            SqsError::InvalidBatchEntryId => "AWS.SimpleQueueService.InvalidBatchEntryId",
            SqsError::BatchRequestTooLong(_) => "AWS.SimpleQueueService.BatchRequestTooLong",
            SqsError::UnsupportedOperation(_) => "AWS.SimpleQueueService.UnsupportedOperation",
            SqsError::AccessDenied(_) => "AccessDenied",
            SqsError::InvalidSignature(SignatureError::Missing) => "MissingAuthenticationToken",
            SqsError::InvalidSignature(SignatureError::Malformed(_)) => "IncompleteSignature",
            SqsError::InvalidAction => "InvalidAction",
            SqsError::SerializationException(_) => "MalformedQueryString",
            other => other.type_name(),
        }
    }

    /// Whose fault the error is: the client's (`Sender`) or the service's (`Receiver`).
    pub fn fault(&self) -> &'static str {
        if self.status().is_server_error() {
            "Receiver"
        } else {
            "Sender"
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            SqsError::AccessDenied(_) | SqsError::InvalidSignature(_) => StatusCode::FORBIDDEN,
            SqsError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            SqsError::ServiceUnavailable | SqsError::ResourceAlarm(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The JSON protocol's namespace for `__type`: SQS's own errors, or the AWS front end's.
    pub fn namespace(&self) -> &'static str {
        match self {
            SqsError::InvalidSignature(_)
            | SqsError::AccessDenied(_)
            | SqsError::InvalidAction
            | SqsError::SerializationException(_)
            | SqsError::MalformedQueryString(_)
            | SqsError::MissingParameter(_)
            | SqsError::InvalidParameterValue(_)
            | SqsError::Internal(_)
            | SqsError::ServiceUnavailable
            | SqsError::ResourceAlarm(_) => "com.amazon.coral.service",
            _ => "com.amazonaws.sqs",
        }
    }
}

impl From<hourglass_mgmt::ApiError> for SqsError {
    fn from(error: hourglass_mgmt::ApiError) -> Self {
        match error.status() {
            StatusCode::SERVICE_UNAVAILABLE => SqsError::ServiceUnavailable,
            _ => SqsError::Internal(error.reason()),
        }
    }
}
