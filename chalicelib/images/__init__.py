"""Images: probe the header, decode within limits, resize, encode. Pure: no network."""
