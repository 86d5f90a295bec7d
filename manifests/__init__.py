"""Kubernetes manifest bodies as pure functions: settings (and plain values) in, dicts out.

Components in components/ only register these bodies with the cluster's provider, so tests can
call the functions directly and the offline plan can write exactly what the API server gets.
"""
