"""Retrieve stages: params, filters, recall, fusion, hit assembly — one small module each."""
