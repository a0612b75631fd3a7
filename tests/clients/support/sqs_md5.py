"""AWS's MD5OfMessageAttributes, written from its documentation, for the scripts that check the
SQS endpoint's digests independently of the broker (tests/clients/sqs_boto3.py,
scripts/sqs_side_by_side.py)."""
import hashlib
import struct


def md5_of_attributes(attributes):
    """Over the attributes in name order: each name and data type as a 4-byte big-endian length
    and the bytes, then 1 and the string value or 2 and the binary value, likewise."""
    digest = hashlib.md5()
    for name in sorted(attributes):
        a = attributes[name]
        for part in (name.encode(), a["DataType"].encode()):
            digest.update(struct.pack(">I", len(part)) + part)
        if "BinaryValue" in a:
            digest.update(b"\x02" + struct.pack(">I", len(a["BinaryValue"])) + a["BinaryValue"])
        else:
            value = a["StringValue"].encode()
            digest.update(b"\x01" + struct.pack(">I", len(value)) + value)
    return digest.hexdigest()
