"""Trace input: parsers for OTLP (JSON and protobuf), Jaeger and Zipkin, file streaming, and store glue."""
