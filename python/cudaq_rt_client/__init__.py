"""cudaq_rt_client: a client of cudaq-rt's wire format over UDP, for servers started with
`cudaq-rt-run PKG --serve`: frames (wire), typed payloads in cudaq-rt-run's --arg syntax
(payload), a Client, a load test (bench) and the cudaq-rt-client command (cli)."""
from .bench import BenchResult, bench, percentile
from .client import Client, NoAnswerError, parse_address
from .payload import (MAX_PAYLOAD, ResultType, decode_result, encode_arg, encode_args,
                      parse_result_type)
from .wire import (HEADER_SIZE, REQUEST_MAGIC, RESPONSE_MAGIC, TRUNCATED_MAGIC, ProtocolError,
                   Request, Response, function_id, parse_request, parse_response, request,
                   response, status_name, status_text)

__version__ = "0.1.0"

__all__ = [
    "BenchResult", "Client", "HEADER_SIZE", "MAX_PAYLOAD", "NoAnswerError", "ProtocolError",
    "REQUEST_MAGIC", "RESPONSE_MAGIC", "Request", "Response", "ResultType", "TRUNCATED_MAGIC",
    "__version__", "bench", "decode_result", "encode_arg", "encode_args", "function_id",
    "parse_address", "parse_request", "parse_response", "parse_result_type", "percentile",
    "request", "response", "status_name", "status_text",
]
