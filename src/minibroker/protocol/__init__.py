"""Kafka wire protocol: framing, kio-based decoding/encoding, and the versions minibroker serves."""
