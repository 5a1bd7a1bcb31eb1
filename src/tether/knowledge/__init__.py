"""Knowledge: documents chunked with their offsets, indexed into a memory, searched and graded.

``KnowledgeBase(memory)`` ingests text, Markdown, HTML and PDF (``tether[knowledge]``);
``Retriever`` runs the retrieval sub-loop (retrieve, grade each passage, rewrite the query
when most miss), whose relevant passages are what an answer may cite.
"""

from tether.knowledge.base import KnowledgeBase, Passage
from tether.knowledge.chunking import Chunk, chunk_text
from tether.knowledge.documents import Document, html_text, read_document
from tether.knowledge.retrieval import Grade, Retrieval, Retriever, Round

__all__ = [
    "Chunk",
    "Document",
    "Grade",
    "KnowledgeBase",
    "Passage",
    "Retrieval",
    "Retriever",
    "Round",
    "chunk_text",
    "html_text",
    "read_document",
]
